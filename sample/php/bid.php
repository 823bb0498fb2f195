<?php
// bid.php — POST item=N user=U amount=A (form-encoded): places a bid, in ONE transaction:
// inserts the bid; item max_bid = max(max_bid, A), nb_bids + 1, version + 1; the item's category,
// the bidder and the seller get version + 1. After the commit: "Tierce-Invalidate: item:N
// category:C user:U user:S" and a text/plain body with the committed versions, one per line.
// Errors: 405 (not POST), 400 (missing/malformed parameter), 404 (unknown item or user).
require __DIR__ . '/lib.php';
require_method('POST');
$item = id_param($_POST, 'item');
$user = id_param($_POST, 'user');
$amount = $_POST['amount'] ?? null;
if (!is_string($amount) || $amount === '') {
    fail(400, "missing parameter 'amount'");
}
if (!preg_match('/^[0-9]{1,8}(\.[0-9]{1,2})?$/', $amount) || (float)$amount <= 0) {
    fail(400, "parameter 'amount' must be a positive amount like 12.50");
}

$versions = in_transaction(function (mysqli $db) use ($item, $user, $amount) {
    // Lock order everywhere: item, then categories, then users by ascending id (no deadlocks).
    $it = query_row($db, 'SELECT category_id, seller_id FROM items WHERE id = ? FOR UPDATE', 'i', $item);
    if ($it === null) {
        abort($db, 404, "no item $item");
    }
    if (query_row($db, 'SELECT id FROM users WHERE id = ?', 'i', $user) === null) {
        abort($db, 404, "no user $user");
    }
    $cat = (int)$it['category_id'];
    $seller = (int)$it['seller_id'];
    $st = $db->prepare('INSERT INTO bids (item_id, user_id, amount, created) VALUES (?, ?, ?, NOW())');
    $st->bind_param('iis', $item, $user, $amount);
    $st->execute();
    $st->close();
    $st = $db->prepare('UPDATE items SET max_bid = GREATEST(max_bid, ?), nb_bids = nb_bids + 1,
                               version = version + 1 WHERE id = ?');
    $st->bind_param('si', $amount, $item);
    $st->execute();
    $st->close();
    $st = $db->prepare('UPDATE categories SET version = version + 1 WHERE id = ?');
    $st->bind_param('i', $cat);
    $st->execute();
    $st->close();
    $users = array_values(array_unique([$user, $seller]));
    sort($users);
    $st = $db->prepare('UPDATE users SET version = version + 1 WHERE id = ?');
    foreach ($users as $u) {
        $st->bind_param('i', $u);
        $st->execute();
    }
    $st->close();
    // Read back inside the transaction (our own updates, rows still locked).
    $v = ["item:$item" => query_row($db, 'SELECT version FROM items WHERE id = ?', 'i', $item)['version'],
          "category:$cat" => query_row($db, 'SELECT version FROM categories WHERE id = ?', 'i', $cat)['version']];
    foreach ([$user, $seller] as $u) {
        $v["user:$u"] = query_row($db, 'SELECT version FROM users WHERE id = ?', 'i', $u)['version'];
    }
    return $v;
});
send_update_result($versions);
