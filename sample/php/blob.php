<?php
// blob.php?id=K — item K's page (as item.php: the item, its seller, its last 10 bids), padded to
// a size that depends on K only: blob_size(K) = 8192 + crc32("blob:K") mod 57345 bytes, i.e.
// 8 KiB to 64 KiB, spread evenly (benchmarks/coop_cache computes the same sizes with zlib.crc32 to
// build its working sets; seed 000 Table 7.1's traces of 8-64 KiB files). The whole response body
// is exactly blob_size(K) bytes unless the item's own content is larger (it never is with the
// generated data: about 2 KiB).
// Coherent like item.php: one read-only consistent-snapshot transaction, "Tierce-Depends: item:K",
// one tierce-data marker item:K=V, buffered with Content-Length; a bid or an edit of item K
// invalidates it. The padding is a pure function of K (it changes with nothing).
// blob.php?id=K&size=small: the same page class with small sizes, 2 KiB to 8 KiB
// (blob_small_size(K) = 2048 + crc32("blob:K") mod 6144), for the HYBCC small-page experiment.
// Errors: 400 (bad id or size), 404 (no item K), 405 (not GET/HEAD).
require __DIR__ . '/lib.php';

const BLOB_MIN = 8192;
const BLOB_MAX = 65536;
const BLOB_SMALL_MIN = 2048;
const BLOB_SMALL_MAX = 8191;

function blob_size(int $k, bool $small = false): int
{
    if ($small) {
        return BLOB_SMALL_MIN + crc32("blob:$k") % (BLOB_SMALL_MAX - BLOB_SMALL_MIN + 1);
    }
    return BLOB_MIN + crc32("blob:$k") % (BLOB_MAX - BLOB_MIN + 1);
}

require_method('GET', 'HEAD');
$id = id_param($_GET, 'id');
$size = $_GET['size'] ?? 'large';
if ($size !== 'large' && $size !== 'small') {
    fail(400, "size must be small or large");
}
[$item, $bids] = item_with_bids($id);
if ($item === null) {
    fail(404, "no item $id");
}
$title = "Blob $id: " . $item['name'];
$body = item_body_html($item, $bids);
$versions = ["item:$id" => $item['version']];
$open = "<pre class=\"blob\">\n";
$close = "</pre>\n";
$bare = strlen(page_html($title, $body . $open . $close, $versions));
$pad = max(0, blob_size($id, $size === 'small') - $bare);
$line = str_pad("blob $id filler", 63) . "\n";
$filler = substr(str_repeat($line, intdiv($pad, 64) + 1), 0, $pad);
send_html(page_html($title, $body . $open . $filler . $close, $versions), ["item:$id"]);
