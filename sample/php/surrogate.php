<?php
// surrogate.php?id=N — item.php, but declaring its dependency as "Surrogate-Key: item:N"
// (to test AppVersionDependencyHeaders with another header name).
require __DIR__ . '/lib.php';
item_page('Surrogate-Key');
