<?php
// user.php?id=U — a user, the items they sell and their last 10 bids. Tierce-Depends: user:U
// (bids are listed by item id only: an item's name may change without bumping its bidders).
require __DIR__ . '/lib.php';
require_method('GET', 'HEAD');
$id = id_param($_GET, 'id');
[$user, $selling, $bids] = in_transaction(function (mysqli $db) use ($id) {
    $user = query_row($db, 'SELECT id, nickname, rating, version FROM users WHERE id = ?', 'i', $id);
    if ($user === null) {
        return [null, [], []];
    }
    $selling = query_rows($db,
        'SELECT id, name, max_bid, nb_bids FROM items WHERE seller_id = ? ORDER BY id LIMIT 100', 'i', $id);
    $bids = query_rows($db,
        'SELECT id, item_id, amount, created FROM bids WHERE user_id = ? ORDER BY id DESC LIMIT 10', 'i', $id);
    return [$user, $selling, $bids];
}, true);
if ($user === null) {
    fail(404, "no user $id");
}
$b = '<p>Rating: ' . (int)$user['rating'] . "</p>\n<h2>Selling</h2>\n<table>\n"
    . "<tr><th>Item</th><th>Current bid</th><th>Bids</th></tr>\n";
foreach ($selling as $it) {
    $b .= '<tr><td><a href="item.php?id=' . (int)$it['id'] . '">' . h($it['name']) . '</a></td><td>'
        . money($it['max_bid']) . '</td><td>' . (int)$it['nb_bids'] . "</td></tr>\n";
}
$b .= "</table>\n<h2>Last bids</h2>\n<table>\n<tr><th>Bid</th><th>Item</th><th>Amount</th><th>Date</th></tr>\n";
foreach ($bids as $bid) {
    $b .= '<tr><td>' . (int)$bid['id'] . '</td><td><a href="item.php?id=' . (int)$bid['item_id'] . '">item '
        . (int)$bid['item_id'] . '</a></td><td>' . money($bid['amount']) . '</td><td>' . h($bid['created']) . "</td></tr>\n";
}
$b .= "</table>\n";
send_page($user['nickname'], $b, ["user:$id" => $user['version']], ["user:$id"]);
