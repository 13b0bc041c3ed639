// Each tile's statistics of the frame demo's blurred image: `tile_stats`
// of examples/common/image.rs, value for value. Tile `t` is rows
// [4t, 4t + 4) of the 512x256 blurred image (2048 u8 pixels, packed
// little-endian four to a u32 word: 512 words). Its 32 (STATS_PER_TILE)
// u32s at [32t, 32t + 32): 16 bins counting the pixels of each grey level
// / 16, then the FNV-1a hash of the pixels in order (start 0x811C9DC5,
// `hash = (hash ^ p) * 0x01000193` wrapping), then 15 zeros.
//
// Dispatch [64, 1, 1] (TILES): workgroup `t` computes tile `t`. Its 64
// invocations count 8 words each (words i, i + 64, ...) into workgroup
// atomic bins (integer adds: the same counts in any order); invocation 0
// alone folds the hash over all 2048 pixels in the CPU's order (word by
// word, each word's bytes low to high). After a barrier, invocations
// 0..31 write the tile's 32 values, one each.
//
// Binding 0: the blurred image (read). Binding 1: the statistics
// (written). No push constants.

const WORDS_PER_TILE: u32 = 512u; // 4 rows * 512 pixels / 4
const BINS: u32 = 16u;
const STATS_PER_TILE: u32 = 32u;
const LANES: u32 = 64u;

@group(0) @binding(0) var<storage, read> blurred: array<u32>;
@group(0) @binding(1) var<storage, read_write> stats: array<u32>;

var<workgroup> bins: array<atomic<u32>, 16>;
var<workgroup> hash: u32;

@compute @workgroup_size(64)
fn main(
    @builtin(workgroup_id) tile: vec3<u32>,
    @builtin(local_invocation_id) lid: vec3<u32>,
) {
    let lane = lid.x;
    let first = tile.x * WORDS_PER_TILE;
    if (lane < BINS) {
        atomicStore(&bins[lane], 0u);
    }
    workgroupBarrier();

    for (var w = lane; w < WORDS_PER_TILE; w += LANES) {
        let word = blurred[first + w];
        for (var b = 0u; b < 4u; b++) {
            let p = (word >> (b * 8u)) & 0xFFu;
            atomicAdd(&bins[p >> 4u], 1u);
        }
    }

    if (lane == 0u) {
        var h = 0x811C9DC5u;
        for (var w = 0u; w < WORDS_PER_TILE; w++) {
            let word = blurred[first + w];
            for (var b = 0u; b < 4u; b++) {
                h = (h ^ ((word >> (b * 8u)) & 0xFFu)) * 0x01000193u;
            }
        }
        hash = h;
    }
    workgroupBarrier();

    if (lane < STATS_PER_TILE) {
        var value = 0u;
        if (lane < BINS) {
            value = atomicLoad(&bins[lane]);
        } else if (lane == BINS) {
            value = hash;
        }
        stats[tile.x * STATS_PER_TILE + lane] = value;
    }
}
