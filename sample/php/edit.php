<?php
// edit.php — POST item=N name=... description=... [category=C] (form-encoded): edits an item in ONE
// transaction: item version + 1; its category version + 1 (old and new when moved); the seller's
// version + 1. After the commit: "Tierce-Invalidate: item:N category:C [category:C2] user:S" and a
// text/plain body with the committed versions, one per line.
// Errors: 405 (not POST), 400 (missing/malformed parameter), 404 (unknown item or category).
require __DIR__ . '/lib.php';
require_method('POST');
$item = id_param($_POST, 'item');
foreach (['name', 'description'] as $p) {
    if (!isset($_POST[$p]) || !is_string($_POST[$p])) {
        fail(400, "missing parameter '$p'");
    }
}
$name = trim($_POST['name']);
$description = $_POST['description'];
if ($name === '' || strlen($name) > 128 || preg_match('//u', $name) !== 1) {
    fail(400, "parameter 'name' must be 1..128 bytes of UTF-8");
}
if (strlen($description) > 65535 || preg_match('//u', $description) !== 1) {
    fail(400, "parameter 'description' must be at most 65535 bytes of UTF-8");
}
$new_cat = (isset($_POST['category']) && $_POST['category'] !== '') ? id_param($_POST, 'category') : null;

$versions = in_transaction(function (mysqli $db) use ($item, $name, $description, $new_cat) {
    // Lock order everywhere: item, then categories, then users by ascending id (no deadlocks).
    $it = query_row($db, 'SELECT category_id, seller_id FROM items WHERE id = ? FOR UPDATE', 'i', $item);
    if ($it === null) {
        abort($db, 404, "no item $item");
    }
    $old_cat = (int)$it['category_id'];
    $seller = (int)$it['seller_id'];
    $cat = $new_cat ?? $old_cat;
    if ($cat !== $old_cat && query_row($db, 'SELECT id FROM categories WHERE id = ?', 'i', $cat) === null) {
        abort($db, 404, "no category $cat");
    }
    $st = $db->prepare('UPDATE items SET name = ?, description = ?, category_id = ?, version = version + 1
                         WHERE id = ?');
    $st->bind_param('ssii', $name, $description, $cat, $item);
    $st->execute();
    $st->close();
    $cats = array_values(array_unique([$old_cat, $cat]));
    sort($cats);
    $st = $db->prepare('UPDATE categories SET version = version + 1 WHERE id = ?');
    foreach ($cats as $c) {
        $st->bind_param('i', $c);
        $st->execute();
    }
    $st->close();
    $st = $db->prepare('UPDATE users SET version = version + 1 WHERE id = ?');
    $st->bind_param('i', $seller);
    $st->execute();
    $st->close();
    $v = ["item:$item" => query_row($db, 'SELECT version FROM items WHERE id = ?', 'i', $item)['version']];
    foreach ($cats as $c) {
        $v["category:$c"] = query_row($db, 'SELECT version FROM categories WHERE id = ?', 'i', $c)['version'];
    }
    $v["user:$seller"] = query_row($db, 'SELECT version FROM users WHERE id = ?', 'i', $seller)['version'];
    return $v;
});
send_update_result($versions);
