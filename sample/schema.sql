-- sample/schema.sql — the RUBiS-like schema of the Tierce sample application (database `rubis`).
-- Drops and re-creates every table: tierce-datagen --schema runs it before loading data.
-- `version` columns count the committed updates of an entity; pages print the versions they were
-- rendered from (<meta name="tierce-data" ...>) so tests can check coherence.

DROP TABLE IF EXISTS bids;
DROP TABLE IF EXISTS items;
DROP TABLE IF EXISTS users;
DROP TABLE IF EXISTS categories;

CREATE TABLE categories (
  id      INT UNSIGNED NOT NULL PRIMARY KEY,
  name    VARCHAR(64)  NOT NULL,
  version BIGINT UNSIGNED NOT NULL DEFAULT 1
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;

CREATE TABLE users (
  id       INT UNSIGNED NOT NULL PRIMARY KEY,
  nickname VARCHAR(64)  NOT NULL,
  rating   INT          NOT NULL DEFAULT 0,
  version  BIGINT UNSIGNED NOT NULL DEFAULT 1
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;

CREATE TABLE items (
  id            INT UNSIGNED NOT NULL PRIMARY KEY,
  category_id   INT UNSIGNED NOT NULL,
  seller_id     INT UNSIGNED NOT NULL,
  name          VARCHAR(128) NOT NULL,
  description   TEXT         NOT NULL,
  initial_price DECIMAL(10,2) NOT NULL,
  max_bid       DECIMAL(10,2) NOT NULL DEFAULT 0,
  nb_bids       INT UNSIGNED NOT NULL DEFAULT 0,
  end_date      DATETIME     NOT NULL,
  version       BIGINT UNSIGNED NOT NULL DEFAULT 1,
  KEY items_category (category_id, id),   -- category.php: 25 items per page
  KEY items_seller (seller_id, id)        -- user.php: items a user sells
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;

CREATE TABLE bids (
  id       BIGINT UNSIGNED NOT NULL AUTO_INCREMENT PRIMARY KEY,
  item_id  INT UNSIGNED NOT NULL,
  user_id  INT UNSIGNED NOT NULL,
  amount   DECIMAL(10,2) NOT NULL,
  created  DATETIME     NOT NULL,
  KEY bids_item (item_id, id),            -- item.php: last 10 bids of an item
  KEY bids_user (user_id, id)             -- user.php: last 10 bids of a user
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;
