<?php
// item.php?id=N — an item, its seller's nickname and its last 10 bids. Tierce-Depends: item:N
require __DIR__ . '/lib.php';
item_page('Tierce-Depends');
