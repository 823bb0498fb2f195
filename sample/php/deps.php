<?php
// deps.php?id=N&k=K — a page that depends on K items: item:N, item:N+1, ..., item:N+K-1
// (K from 1 to 64, default 1). Used by benchmarks/coherent_cache (dependencies-per-page sweep,
// thesis Fig. 6.9): a bid on item j invalidates every deps.php page whose range covers j.
// Same conventions as item.php: one read-only consistent-snapshot transaction, buffered output with
// Content-Length, "Tierce-Depends: item:N ... item:N+K-1", one tierce-data marker per item found
// (item:J=V). Items past the last one are still declared (harmless) but not shown.
// Errors: 400 (bad id or k), 404 (item N does not exist), 405 (not GET/HEAD).
require __DIR__ . '/lib.php';
require_method('GET', 'HEAD');
$id = id_param($_GET, 'id');
$k = optional_int_param($_GET, 'k', 1, 1);
if ($k > 64) {
    fail(400, "parameter 'k' must be between 1 and 64");
}
$last = $id + $k - 1;
$items = in_transaction(function (mysqli $db) use ($id, $last) {
    return query_rows($db,
        'SELECT id, name, max_bid, nb_bids, version FROM items WHERE id BETWEEN ? AND ? ORDER BY id',
        'ii', $id, $last);
}, true);
if (!$items || (int)$items[0]['id'] !== $id) {
    fail(404, "no item $id");
}
$versions = [];
$deps = [];
for ($j = $id; $j <= $last; $j++) {
    $deps[] = "item:$j";
}
$b = "<table>\n<tr><th>Item</th><th>Current bid</th><th>Bids</th></tr>\n";
foreach ($items as $it) {
    $versions['item:' . (int)$it['id']] = $it['version'];
    $b .= '<tr><td><a href="item.php?id=' . (int)$it['id'] . '">' . h($it['name']) . '</a></td><td>'
        . money($it['max_bid']) . '</td><td>' . (int)$it['nb_bids'] . "</td></tr>\n";
}
$b .= "</table>\n";
send_page("Items $id to $last", $b, $versions, $deps);
