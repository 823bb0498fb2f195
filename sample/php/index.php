<?php
// index.php — the list of categories. Tierce-Depends: categories
require __DIR__ . '/lib.php';
require_method('GET', 'HEAD');
$cats = in_transaction(function (mysqli $db) {
    return query_rows($db, 'SELECT id, name FROM categories ORDER BY id');
}, true);
$b = "<ul>\n";
foreach ($cats as $c) {
    $b .= '<li><a href="category.php?id=' . (int)$c['id'] . '">' . h($c['name']) . "</a></li>\n";
}
$b .= "</ul>\n";
send_page('Categories', $b, [], ['categories']);
