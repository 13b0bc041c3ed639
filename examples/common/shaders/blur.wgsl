// The 3x3 box blur of the frame demo's grey image: `blur_rows` of
// examples/common/image.rs, byte for byte (the same integer sums, edges
// repeating the nearest pixel, each sum of nine divided by 9 rounding
// down). A 512x256 image of u8 pixels, packed little-endian four to a u32
// word (`array<u32>`: WGSL has no u8 storage).
//
// Dispatch [64, 1, 1] (TILES): workgroup `t` writes tile `t`, rows
// [4t, 4t + 4). Its 128 invocations are the 128 words of a row: invocation
// `i` writes word `i` (pixels 4i..4i+3) of each of the tile's 4 rows, so
// every output word is written whole by exactly one invocation.
//
// Binding 0: the source image (read). Binding 1: the blurred image
// (written). No push constants.

const WIDTH: u32 = 512u;
const HEIGHT: u32 = 256u;
const WORDS_PER_ROW: u32 = 128u; // WIDTH / 4
const ROWS_PER_TILE: u32 = 4u; // HEIGHT / TILES

@group(0) @binding(0) var<storage, read> src: array<u32>;
@group(0) @binding(1) var<storage, read_write> dst: array<u32>;

// Pixel `x` of row `y` (both in bounds).
fn pixel(x: u32, y: u32) -> u32 {
    let i = y * WIDTH + x;
    return (src[i / 4u] >> ((i % 4u) * 8u)) & 0xFFu;
}

// The vertical sum at column `x` (in bounds) of rows `above`, `y`, `below`.
fn column(x: u32, above: u32, y: u32, below: u32) -> u32 {
    return pixel(x, above) + pixel(x, y) + pixel(x, below);
}

@compute @workgroup_size(128)
fn main(
    @builtin(workgroup_id) tile: vec3<u32>,
    @builtin(local_invocation_id) lid: vec3<u32>,
) {
    let word = lid.x;
    let x0 = word * 4u;
    for (var r = 0u; r < ROWS_PER_TILE; r++) {
        let y = tile.x * ROWS_PER_TILE + r;
        // Edges repeat the nearest row (`saturating_sub(1)`, `min`).
        let above = select(y - 1u, 0u, y == 0u);
        let below = min(y + 1u, HEIGHT - 1u);
        // Columns x0 - 1 ..= x0 + 4, edges repeating the nearest column.
        var sums: array<u32, 6>;
        for (var k = 0u; k < 6u; k++) {
            let x = clamp(i32(x0) + i32(k) - 1, 0, i32(WIDTH) - 1);
            sums[k] = column(u32(x), above, y, below);
        }
        var packed = 0u;
        for (var k = 0u; k < 4u; k++) {
            let blurred = (sums[k] + sums[k + 1u] + sums[k + 2u]) / 9u;
            packed |= blurred << (k * 8u);
        }
        dst[y * WORDS_PER_ROW + word] = packed;
    }
}
