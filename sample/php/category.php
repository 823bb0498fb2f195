<?php
// category.php?id=C&page=P — 25 items of category C (name, current bid, number of bids), page P
// (0-based, default 0; past the end: an empty list). Tierce-Depends: category:C
require __DIR__ . '/lib.php';
require_method('GET', 'HEAD');
$id = id_param($_GET, 'id');
$page = optional_int_param($_GET, 'page', 0, 0);
const PER_PAGE = 25;
[$cat, $items] = in_transaction(function (mysqli $db) use ($id, $page) {
    $cat = query_row($db, 'SELECT id, name, version FROM categories WHERE id = ?', 'i', $id);
    if ($cat === null) {
        return [null, []];
    }
    $offset = $page * PER_PAGE;
    $limit = PER_PAGE;
    $items = query_rows($db,
        'SELECT id, name, max_bid, nb_bids, end_date FROM items WHERE category_id = ?
          ORDER BY id LIMIT ? OFFSET ?', 'iii', $id, $limit, $offset);
    return [$cat, $items];
}, true);
if ($cat === null) {
    fail(404, "no category $id");
}
$b = "<table>\n<tr><th>Item</th><th>Current bid</th><th>Bids</th><th>Ends</th></tr>\n";
foreach ($items as $it) {
    $b .= '<tr><td><a href="item.php?id=' . (int)$it['id'] . '">' . h($it['name']) . '</a></td><td>'
        . money($it['max_bid']) . '</td><td>' . (int)$it['nb_bids'] . '</td><td>' . h($it['end_date']) . "</td></tr>\n";
}
$b .= "</table>\n<p>";
if ($page > 0) {
    $b .= '<a href="category.php?id=' . $id . '&amp;page=' . ($page - 1) . '">previous</a> ';
}
if (count($items) === PER_PAGE) {
    $b .= '<a href="category.php?id=' . $id . '&amp;page=' . ($page + 1) . '">next</a>';
}
$b .= "</p>\n";
send_page($cat['name'] . ($page > 0 ? " (page $page)" : ''), $b, ["category:$id" => $cat['version']], ["category:$id"]);
