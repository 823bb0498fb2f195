<?php
// lib.php — shared code of the Tierce sample application (RUBiS-like). Not a page itself.
//
// Every page is buffered (ob_start) and sent with an explicit Content-Length, so Apache mod_cache
// can store it. Pages name what they depend on in a response header (Tierce-Depends by default)
// and carry, in the body, the versions of the data they were rendered from:
//   <meta name="tierce-data" content="item:42=17">
// Updates commit ONE transaction before any output, then send Tierce-Invalidate and a text/plain
// body with the committed versions ("item:42=18" lines).
//
// Database settings come from the httpd configuration (SetEnv TIERCE_DB_HOST, TIERCE_DB_PORT,
// TIERCE_DB_USER, TIERCE_DB_PASSWORD, TIERCE_DB_NAME); defaults 127.0.0.1:3306 tierce/tierce rubis.

if (basename($_SERVER['SCRIPT_FILENAME'] ?? '') === 'lib.php') {
    http_response_code(404);
    exit;
}

ob_start();
mysqli_report(MYSQLI_REPORT_ERROR | MYSQLI_REPORT_STRICT);

function tierce_env(string $name, string $default): string
{
    $v = $_SERVER[$name] ?? getenv($name);
    return ($v === false || $v === null || $v === '') ? $default : (string)$v;
}

// Ends the request with a plain-text error (never a PHP warning page).
function fail(int $status, string $message): void
{
    while (ob_get_level() > 0) {
        ob_end_clean();
    }
    $body = $message . "\n";
    http_response_code($status);
    header('Content-Type: text/plain; charset=utf-8');
    header('Cache-Control: no-store');
    header('Content-Length: ' . strlen($body));
    echo $body;
    exit;
}

function require_method(string ...$allowed): void
{
    $m = $_SERVER['REQUEST_METHOD'] ?? 'GET';
    if (!in_array($m, $allowed, true)) {
        header('Allow: ' . implode(', ', $allowed));
        fail(405, "method $m not allowed here; use " . implode(' or ', $allowed));
    }
}

// A positive integer id from $src[$name]; 400 when missing or malformed.
function id_param(array $src, string $name): int
{
    if (!isset($src[$name]) || !is_string($src[$name]) || $src[$name] === '') {
        fail(400, "missing parameter '$name'");
    }
    $v = $src[$name];
    if (!preg_match('/^[0-9]{1,10}$/', $v) || (int)$v < 1 || (int)$v > 4294967295) {
        fail(400, "parameter '$name' must be a positive integer, got '" . substr($v, 0, 40) . "'");
    }
    return (int)$v;
}

function optional_int_param(array $src, string $name, int $default, int $min): int
{
    if (!isset($src[$name]) || $src[$name] === '') {
        return $default;
    }
    $v = $src[$name];
    if (!is_string($v) || !preg_match('/^[0-9]{1,9}$/', $v) || (int)$v < $min) {
        fail(400, "parameter '$name' must be an integer >= $min");
    }
    return (int)$v;
}

function db(): mysqli
{
    static $db = null;
    if ($db !== null) {
        return $db;
    }
    try {
        $db = new mysqli(
            'p:' . tierce_env('TIERCE_DB_HOST', '127.0.0.1'),
            tierce_env('TIERCE_DB_USER', 'tierce'),
            tierce_env('TIERCE_DB_PASSWORD', 'tierce'),
            tierce_env('TIERCE_DB_NAME', 'rubis'),
            (int)tierce_env('TIERCE_DB_PORT', '3306')
        );
        $db->set_charset('utf8mb4');
        // A persistent connection may come back from a request that died mid-transaction.
        $db->rollback();
        $db->autocommit(true);
    } catch (mysqli_sql_exception $e) {
        error_log('tierce sample: database connection failed: ' . $e->getMessage());
        fail(503, 'database unavailable');
    }
    return $db;
}

// Runs $fn($db) inside one transaction; retries deadlocks; maps database errors to 5xx.
function in_transaction(callable $fn, bool $read_only = false)
{
    $db = db();
    for ($attempt = 1; ; $attempt++) {
        try {
            if ($read_only) {
                $db->begin_transaction(MYSQLI_TRANS_START_READ_ONLY | MYSQLI_TRANS_START_WITH_CONSISTENT_SNAPSHOT);
            } else {
                $db->begin_transaction(MYSQLI_TRANS_START_READ_WRITE);
                fence_check($db);
            }
            $result = $fn($db);
            $db->commit();
            return $result;
        } catch (mysqli_sql_exception $e) {
            try {
                $db->rollback();
            } catch (Throwable $ignored) {
            }
            $code = $e->getCode();
            if (($code === 1213 || $code === 1205) && $attempt < 5) { // deadlock, lock wait timeout
                usleep(1000 * $attempt);
                continue;
            }
            if ($code === 1792) { // a READ ONLY transaction: the tierce extension refused the write
                fail(503, 'writes refused: this app node is out of the cache fence (PHPEXT0301 in the error log)');
            }
            error_log('tierce sample: SQL error ' . $code . ': ' . $e->getMessage());
            fail($code === 1205 || $code === 1213 ? 503 : 500, 'database error ' . $code);
        } catch (Throwable $e) {
            try {
                $db->rollback();
            } catch (Throwable $ignored) {
            }
            throw $e;
        }
    }
}

// The fence's arbiter (docs/coherence.md, "A lost node: the database as the arbiter"): the first
// statement of every read-write transaction is a locking read of this node's row in
// TIERCE_FENCE_TABLE, held until COMMIT; the transaction writes only while the row says "in". A
// home that drops this node (it could not read its writer counter) waits for this transaction or
// makes it see "out". Nothing to do without a table, or when the tierce PHP extension is loaded
// (it does the same before the first write of each transaction).
function fence_check(mysqli $db): void
{
    $table = tierce_env('TIERCE_FENCE_TABLE', '');
    if ($table === '' || extension_loaded('tierce')) {
        return;
    }
    if (!preg_match('/^[A-Za-z0-9_]+\.[A-Za-z0-9_]+$/', $table)) {
        $db->rollback();
        fail(500, "TIERCE_FENCE_TABLE must be schema.table, not '" . substr($table, 0, 64) . "'");
    }
    $node = tierce_env('TIERCE_NODE', '');
    $row = query_row($db, "SELECT state, epoch FROM $table WHERE node = ? LOCK IN SHARE MODE", 's', $node);
    if ($row === null || $row['state'] !== 'in') {
        $db->rollback();
        $why = $row === null ? "has no row in $table (the homes create it)"
                             : "is OUT of the cache fence (epoch {$row['epoch']})";
        error_log("tierce sample: app node '$node' $why: its writes are refused until every home reads "
                  . "its writer counter again and re-admits it (docs/coherence.md)");
        fail(503, "writes refused: app node '$node' $why");
    }
}

// Rolls back the current transaction then fails (used inside in_transaction callbacks).
function abort(mysqli $db, int $status, string $message): void
{
    $db->rollback();
    fail($status, $message);
}

function query_rows(mysqli $db, string $sql, string $types = '', ...$args): array
{
    $st = $db->prepare($sql);
    if ($types !== '') {
        $st->bind_param($types, ...$args);
    }
    $st->execute();
    $res = $st->get_result();
    $rows = $res ? $res->fetch_all(MYSQLI_ASSOC) : [];
    $st->close();
    return $rows;
}

function query_row(mysqli $db, string $sql, string $types = '', ...$args): ?array
{
    $rows = query_rows($db, $sql, $types, ...$args);
    return $rows[0] ?? null;
}

function h($s): string
{
    return htmlspecialchars((string)$s, ENT_QUOTES | ENT_SUBSTITUTE, 'UTF-8');
}

// A complete HTML page. $versions: ['item:42' => 17, ...] -> one tierce-data meta each.
function page_html(string $title, string $body_html, array $versions): string
{
    $meta = '';
    foreach ($versions as $key => $version) {
        $meta .= '<meta name="tierce-data" content="' . h($key . '=' . $version) . "\">\n";
    }
    return "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\">\n" . $meta
        . '<title>' . h($title) . " — Tierce auctions</title></head>\n<body>\n"
        . '<p><a href="index.php">Tierce auctions</a></p>' . "\n"
        . '<h1>' . h($title) . "</h1>\n" . $body_html . "</body></html>\n";
}

// Whether pages name their dependencies and updates their invalidations themselves (headers).
// SetEnv TIERCE_EXPLICIT_DEPS 0 when the tierce PHP extension derives them from the SQL instead
// (tierce.auto; docs/php_extension.md).
function explicit_deps(): bool
{
    return tierce_env('TIERCE_EXPLICIT_DEPS', '1') !== '0';
}

// Sends $html (from page_html) with Content-Length. $deps: dependency keys, sent space-separated
// in $dep_header.
function send_html(string $html, array $deps, string $dep_header = 'Tierce-Depends'): void
{
    while (ob_get_level() > 0) {
        ob_end_clean();
    }
    ob_start();
    http_response_code(200);
    header('Content-Type: text/html; charset=utf-8');
    if ($deps && explicit_deps()) {
        header($dep_header . ': ' . implode(' ', $deps));
    }
    header('Content-Length: ' . strlen($html));
    echo $html;
    ob_end_flush();
}

// Sends a complete HTML page (page_html + send_html).
function send_page(string $title, string $body_html, array $versions, array $deps,
                   string $dep_header = 'Tierce-Depends'): void
{
    send_html(page_html($title, $body_html, $versions), $deps, $dep_header);
}

// Sends the result of a committed update: Tierce-Invalidate + "key=version" lines.
function send_update_result(array $versions): void
{
    $body = '';
    foreach ($versions as $key => $version) {
        $body .= $key . '=' . $version . "\n";
    }
    while (ob_get_level() > 0) {
        ob_end_clean();
    }
    ob_start();
    http_response_code(200);
    header('Content-Type: text/plain; charset=utf-8');
    header('Cache-Control: no-store');
    if (explicit_deps()) {
        header('Tierce-Invalidate: ' . implode(' ', array_keys($versions)));
    }
    header('Content-Length: ' . strlen($body));
    echo $body;
    ob_end_flush();
}

function money($v): string
{
    return number_format((float)$v, 2, '.', '');
}

// The item, its seller's nickname and category, and its last 10 bids, read in one read-only
// consistent-snapshot transaction: [item row or null, bid rows].
function item_with_bids(int $id): array
{
    return in_transaction(function (mysqli $db) use ($id) {
        $item = query_row($db,
            'SELECT i.id, i.name, i.description, i.initial_price, i.max_bid, i.nb_bids, i.end_date,
                    i.version, i.category_id, i.seller_id, u.nickname AS seller, c.name AS category
               FROM items i JOIN users u ON u.id = i.seller_id JOIN categories c ON c.id = i.category_id
              WHERE i.id = ?', 'i', $id);
        if ($item === null) {
            return [null, []];
        }
        $bids = query_rows($db,
            'SELECT b.id, b.amount, b.created, b.user_id, u.nickname
               FROM bids b JOIN users u ON u.id = b.user_id
              WHERE b.item_id = ? ORDER BY b.id DESC LIMIT 10', 'i', $id);
        return [$item, $bids];
    }, true);
}

// The body of an item page (item.php, surrogate.php, blob.php) from item_with_bids().
function item_body_html(array $item, array $bids): string
{
    $b = '<p>' . h($item['description']) . "</p>\n<table>\n"
        . '<tr><th>Category</th><td>' . h($item['category']) . "</td></tr>\n"
        . '<tr><th>Seller</th><td><a href="user.php?id=' . (int)$item['seller_id'] . '">' . h($item['seller']) . "</a></td></tr>\n"
        . '<tr><th>Initial price</th><td>' . money($item['initial_price']) . "</td></tr>\n"
        . '<tr><th>Current bid</th><td>' . money($item['max_bid']) . "</td></tr>\n"
        . '<tr><th>Bids</th><td>' . (int)$item['nb_bids'] . "</td></tr>\n"
        . '<tr><th>Ends</th><td>' . h($item['end_date']) . "</td></tr>\n</table>\n"
        . "<h2>Last bids</h2>\n<table>\n<tr><th>Bid</th><th>Bidder</th><th>Amount</th><th>Date</th></tr>\n";
    foreach ($bids as $bid) {
        $b .= '<tr><td>' . (int)$bid['id'] . '</td><td><a href="user.php?id=' . (int)$bid['user_id'] . '">'
            . h($bid['nickname']) . '</a></td><td>' . money($bid['amount']) . '</td><td>' . h($bid['created']) . "</td></tr>\n";
    }
    return $b . "</table>\n";
}

// item.php and surrogate.php: the item, its seller's nickname and its last 10 bids.
function item_page(string $dep_header): void
{
    require_method('GET', 'HEAD');
    $id = id_param($_GET, 'id');
    [$item, $bids] = item_with_bids($id);
    if ($item === null) {
        fail(404, "no item $id");
    }
    send_page($item['name'], item_body_html($item, $bids), ["item:$id" => $item['version']], ["item:$id"], $dep_header);
}
