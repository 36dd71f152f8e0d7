//! Measured dispatch: which instance of a method ran fastest on which GPU at which shape, as
//! `tilegen tune` measured it and `tilegen generate` baked it into the bindings.
//!
//! A method's plan function asks [`pick`] (or, for tiled GEMMs, [`pick_tiled`]) first. The
//! table's entries for this device are those measured on a GPU of exactly its name; when there
//! are none, those measured on one of the same compute capability; when there are none either,
//! the method uses its fixed rules (as on a GPU no table knows). Only entries within a factor
//! of [`MAX_RATIO`] of the call's shape in every dimension count, so a shape far from every
//! measured one falls back to the rules rather than trusting a guess. The instance picked must
//! still accept the call; when it refuses, the rules decide.
//!
//! [`pick`] takes the winner of the nearest entry: distance is the sum over dimensions of
//! |log2(call / entry)| (so 2× off in one dimension costs as much as 2× off in another), ties
//! to the first entry listed. A GEMM's time jumps with the rounds of output tiles its grid
//! takes, which the nearest entry's winner can get badly wrong between measured shapes (a tile
//! that filled the GPU at M = 128 leaves half of it idle at M = 192), so [`pick_tiled`]
//! predicts instead: every member timed at an entry nearby (winner, runner-up, the rules'
//! pick) has its time there scaled to the call by its rounds of tiles and by k, and the member
//! predicted fastest wins. Where the fixed rules rank the members by a cost model (wgmma
//! GEMMs on sm_90), only entries within [`NEAR_DISTANCE`] count: farther off the rules do
//! better.

use crate::loader::Device;

/// How far (as a ratio, in each dimension) a call's shape may be from a measured one for
/// that measurement to decide.
pub const MAX_RATIO: f64 = 4.0;

/// One measured shape: on the GPU named `device` (compute capability `major.minor`, `sm_count`
/// SMs), at `shape` (the method's size arguments in order, e.g. `[rows, cols]` or `[m, n, k]`),
/// the members timed there as (index into the method's instance list, median µs), fastest
/// first: the winner, then the runner-up and the fixed rules' pick where they were others.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Tuned<'a> {
    pub device: &'a str,
    pub major: u32,
    pub minor: u32,
    pub sm_count: u32,
    pub shape: &'a [u64],
    pub timed: &'a [(usize, f64)],
}

impl Tuned<'_> {
    /// The member that ran fastest at this shape.
    pub fn winner(&self) -> Option<usize> {
        self.timed.first().map(|&(member, _)| member)
    }
}

/// The table's entries for `device` (see the module docs).
fn entries_for<'t, 'a>(
    device: &'t Device,
    table: &'t [Tuned<'a>],
) -> impl Iterator<Item = &'t Tuned<'a>> + 't {
    let name = device.name.as_str();
    let by_name = !name.is_empty() && table.iter().any(|t| t.device == name);
    table.iter().filter(move |t| match by_name {
        true => t.device == name,
        false => t.major == device.major && t.minor == device.minor,
    })
}

/// The member the table picks for a call of `shape` on `device`, if any: the winner of the
/// nearest entry (see the module docs).
pub fn pick(device: &Device, table: &[Tuned<'_>], shape: &[u64]) -> Option<usize> {
    let mut best: Option<(f64, usize)> = None;
    for t in entries_for(device, table) {
        let (Some(d), Some(member)) = (distance(shape, t.shape), t.winner()) else {
            continue;
        };
        if best.is_none_or(|(b, _)| d < b) {
            best = Some((d, member));
        }
    }
    best.map(|(_, member)| member)
}

/// How a GEMM member covers its `m × n` output: tiles of `tile_m × tile_n`, each taken by
/// `blocks_per_tile` blocks (that split K between them), with `blocks_per_sm` resident on each
/// SM. The blocks loop over the tiles (or, for a grid of one block per tile, the GPU runs them
/// in rounds), so the rounds set the time as much as the tile's own speed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tiling {
    pub tile_m: u32,
    pub tile_n: u32,
    pub blocks_per_tile: u32,
    pub blocks_per_sm: u32,
}

impl Tiling {
    /// Rounds of output tiles an `m × n` output takes on `sm_count` SMs.
    pub fn rounds(&self, m: u64, n: u64, sm_count: u32) -> u64 {
        let tiles = m
            .div_ceil(self.tile_m.max(1) as u64)
            .saturating_mul(n.div_ceil(self.tile_n.max(1) as u64));
        let blocks = (sm_count.max(1) as u64).saturating_mul(self.blocks_per_sm.max(1) as u64);
        let at_once = (blocks / self.blocks_per_tile.max(1) as u64).max(1);
        tiles.div_ceil(at_once)
    }
}

/// How much [`pick_tiled`] distrusts a prediction from an entry away from the call: it counts
/// as this much slower per unit of distance (a factor 2 in one dimension). The rounds of tiles
/// are not all that changes between shapes (how often the operands come from L2 does too), so
/// between two members predicted alike, the one measured nearer wins. Chosen on the H200's
/// table (`bench/results/2026-12-03-h200-tune-between-shapes.txt`).
pub const DISTANCE_PENALTY: f64 = 0.25;

/// How near (in [`pick`]'s distance) an entry must be to decide a GEMM call whose fixed rules
/// rank the members by `call_checks::wgmma_cost`: 0.25, a factor 1.19 in one dimension. Beyond
/// it those rules pick better than [`pick_tiled`]'s prediction. Judged on the H200's tuning
/// runs, each GEMM shape left out of the table in turn (`bench/tuning-lookup/reach.py`): the
/// prediction from the other entries took 1.023× the fastest member's time on geometric mean
/// (worst 1.99×), the rules 1.010× (1.17×); the rules fitted on half of the shapes read
/// 1.013–1.015× on the other half, the prediction 1.016–1.029× there. By the distance of the
/// nearest entry left: under 0.3 the two tie (96 method-shapes, 1.002×), from 0.3 to 0.6 the
/// prediction reads 1.023× against 1.010×, and farther the rules lead in every band (by
/// 0.7–2.2 %).
pub const NEAR_DISTANCE: f64 = 0.25;

/// The member predicted fastest for a GEMM call of `shape` (`[m, n, k]`) on `device`, if the
/// table has entries near it: within [`NEAR_DISTANCE`] when `rules_model` (the fixed rules
/// rank the call's members by `call_checks::wgmma_cost`: some tensor-map member runs here),
/// else within [`MAX_RATIO`]. Each member timed at such an entry takes its time at the
/// nearest one, times its rounds of tiles here over its rounds there, times the ratio of k,
/// counted slower by [`DISTANCE_PENALTY`] per unit of distance (see the module docs).
/// `tilings` are the members' tilings, in member order; a member without one is not
/// predicted. Ties go to the member measured nearer, then to the one ranked higher where it
/// was measured, then to the lower index.
pub fn pick_tiled(
    device: &Device,
    table: &[Tuned<'_>],
    shape: &[u64],
    tilings: &[Tiling],
    rules_model: bool,
) -> Option<usize> {
    let &[m, n, k] = shape else {
        return None;
    };
    let reach = if rules_model {
        NEAR_DISTANCE
    } else {
        f64::INFINITY
    };
    // Per member, from its nearest entry: (distance, predicted µs, its place in that entry's
    // ranking). Times are kept to two significant digits, so the ranking, measured at full
    // precision, settles equal predictions from one entry.
    let mut nearest: Vec<Option<(f64, f64, usize)>> = vec![None; tilings.len()];
    for t in entries_for(device, table) {
        let (Some(d), &[em, en, ek]) = (distance(shape, t.shape), t.shape) else {
            continue;
        };
        if d > reach {
            continue;
        }
        for (rank, &(member, us)) in t.timed.iter().enumerate() {
            let Some(tiling) = tilings.get(member) else {
                continue;
            };
            let there = tiling.rounds(em, en, t.sm_count);
            if there == 0 || ek == 0 || !us.is_finite() || us < 0.0 {
                continue;
            }
            let here = tiling.rounds(m, n, device.sm_count);
            let predicted = us * (here as f64 / there as f64) * (k as f64 / ek as f64);
            let slot = &mut nearest[member];
            if slot.is_none_or(|(best, _, _)| d < best) {
                *slot = Some((d, predicted, rank));
            }
        }
    }
    let mut best: Option<((f64, f64, usize), usize)> = None;
    for (member, slot) in nearest.iter().enumerate() {
        if let Some((d, predicted, rank)) = *slot {
            let score = (predicted * (1.0 + DISTANCE_PENALTY * d), d, rank);
            if best.is_none_or(|(b, _)| score < b) {
                best = Some((score, member));
            }
        }
    }
    best.map(|(_, member)| member)
}

/// Log-scale distance between a call's shape and an entry's, or None when they differ in
/// rank or by more than [`MAX_RATIO`] in some dimension. A zero-sized dimension matches only
/// zero.
fn distance(call: &[u64], entry: &[u64]) -> Option<f64> {
    if call.len() != entry.len() {
        return None;
    }
    let mut sum = 0.0;
    for (&c, &e) in call.iter().zip(entry) {
        if c == 0 || e == 0 {
            if c != e {
                return None;
            }
            continue;
        }
        let d = ((c as f64) / (e as f64)).log2().abs();
        if d > MAX_RATIO.log2() {
            return None;
        }
        sum += d;
    }
    Some(sum)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::loader::DeviceName;

    fn device(name: &str, major: u32, minor: u32) -> Device {
        Device {
            major,
            minor,
            sm_count: 132,
            driver: None,
            name: DeviceName::new(name),
        }
    }

    const TABLE: &[Tuned<'static>] = &[
        Tuned {
            device: "NVIDIA H200",
            major: 9,
            minor: 0,
            sm_count: 132,
            shape: &[32768, 4096],
            timed: &[(1, 10.0)],
        },
        Tuned {
            device: "NVIDIA H200",
            major: 9,
            minor: 0,
            sm_count: 132,
            shape: &[65536, 1024],
            timed: &[(2, 10.0)],
        },
        Tuned {
            device: "NVIDIA H100 80GB HBM3",
            major: 9,
            minor: 0,
            sm_count: 132,
            shape: &[32768, 4096],
            timed: &[(3, 10.0)],
        },
        Tuned {
            device: "NVIDIA A100-SXM4-80GB",
            major: 8,
            minor: 0,
            sm_count: 132,
            shape: &[32768, 4096],
            timed: &[(4, 10.0)],
        },
    ];

    #[test]
    fn exact_name_first_then_compute_capability_then_nothing() {
        let h200 = device("NVIDIA H200", 9, 0);
        assert_eq!(pick(&h200, TABLE, &[32768, 4096]), Some(1));
        assert_eq!(pick(&h200, TABLE, &[60000, 1000]), Some(2));
        // An sm_90 the table does not name takes the first sm_90 entries' nearest shape.
        let other = device("NVIDIA GH200 480GB", 9, 0);
        assert_eq!(pick(&other, TABLE, &[32768, 4096]), Some(1));
        // A device that did not give its name is matched by capability alone.
        assert_eq!(pick(&device("", 8, 0), TABLE, &[32768, 4096]), Some(4));
        // A GPU the table does not know: the rules decide.
        assert_eq!(
            pick(&device("NVIDIA L4", 8, 9), TABLE, &[32768, 4096]),
            None
        );
        assert_eq!(pick(&h200, &[], &[32768, 4096]), None);
    }

    #[test]
    fn nearest_shape_within_the_ratio_only() {
        let h200 = device("NVIDIA H200", 9, 0);
        // 2x off in one dimension is nearer than 4x off.
        assert_eq!(pick(&h200, TABLE, &[32768, 2048]), Some(1));
        assert_eq!(pick(&h200, TABLE, &[65536, 2048]), Some(2));
        // More than MAX_RATIO away in any dimension: no entry decides.
        assert_eq!(pick(&h200, TABLE, &[32768, 32768]), None);
        assert_eq!(pick(&h200, TABLE, &[1, 4096]), None);
        // Shapes of another rank, and zero sizes, never match a measured shape.
        assert_eq!(pick(&h200, TABLE, &[32768]), None);
        assert_eq!(pick(&h200, TABLE, &[0, 4096]), None);
    }

    /// Three GEMM members: 0 tiles 64 × 128, 1 tiles 128 × 128, 2 tiles 128 × 64 in pairs of
    /// blocks that split K.
    const TILINGS: &[Tiling] = &[
        Tiling {
            tile_m: 64,
            tile_n: 128,
            blocks_per_tile: 1,
            blocks_per_sm: 1,
        },
        Tiling {
            tile_m: 128,
            tile_n: 128,
            blocks_per_tile: 1,
            blocks_per_sm: 1,
        },
        Tiling {
            tile_m: 128,
            tile_n: 64,
            blocks_per_tile: 2,
            blocks_per_sm: 1,
        },
    ];

    fn gemm_entry(shape: &'static [u64], timed: &'static [(usize, f64)]) -> Tuned<'static> {
        Tuned {
            device: "NVIDIA H200",
            major: 9,
            minor: 0,
            sm_count: 132,
            shape,
            timed,
        }
    }

    #[test]
    fn rounds_of_tiles() {
        // 4096² in 128 × 256 tiles: 512 tiles, 3.9 rounds of 132.
        let wide = Tiling {
            tile_m: 128,
            tile_n: 256,
            blocks_per_tile: 1,
            blocks_per_sm: 1,
        };
        assert_eq!(wide.rounds(4096, 4096, 132), 4);
        assert_eq!(wide.rounds(1, 1, 132), 1);
        assert_eq!(wide.rounds(0, 4096, 132), 0);
        // Pairs of blocks per tile: 66 tiles at once.
        assert_eq!(TILINGS[2].rounds(128, 64 * 66, 132), 1);
        assert_eq!(TILINGS[2].rounds(128, 64 * 67, 132), 2);
        // Two blocks per SM take twice the tiles at once; a device that reports no SMs, one.
        let two = Tiling {
            blocks_per_sm: 2,
            ..TILINGS[1]
        };
        assert_eq!(two.rounds(4096, 4096, 132), 4);
        assert_eq!(TILINGS[1].rounds(4096, 4096, 0), 1024);
        assert_eq!(wide.rounds(u64::MAX, u64::MAX, 132), u64::MAX / 132 + 1);
    }

    #[test]
    fn tiled_pick_follows_the_rounds_between_measured_shapes() {
        let h200 = device("NVIDIA H200", 9, 0);
        // At M = 128 the 64-row tile won: both fill one round, and it is quicker.
        let table = [gemm_entry(&[128, 4096, 4096], &[(0, 19.0), (1, 21.0)])];
        assert_eq!(pick(&h200, &table, &[512, 4096, 4096]), Some(0));
        // At M = 512 it takes two rounds (256 tiles) where 128 rows take one (128 tiles).
        assert_eq!(
            pick_tiled(&h200, &table, &[512, 4096, 4096], TILINGS, false),
            Some(1)
        );
        assert_eq!(
            pick_tiled(&h200, &table, &[128, 4096, 4096], TILINGS, false),
            Some(0)
        );
        // k scales every member alike.
        assert_eq!(
            pick_tiled(&h200, &table, &[128, 4096, 16384], TILINGS, false),
            Some(0)
        );
        // Each member is judged at its own nearest entry, however far the other's are.
        let table = [
            gemm_entry(&[512, 4096, 4096], &[(0, 36.0)]),
            gemm_entry(&[128, 4096, 4096], &[(0, 19.0), (1, 21.0)]),
        ];
        // Member 0 from 512 rows: 36 µs, two rounds there and at 500 rows; member 1 from 128
        // rows, nearly 2 (factors of 2) away: 21 µs, one round, counted as 21 · 1.49.
        assert_eq!(
            pick_tiled(&h200, &table, &[500, 4096, 4096], TILINGS, false),
            Some(1)
        );
        // A prediction from far off loses to a slightly slower one measured near.
        let table = [
            gemm_entry(&[512, 4096, 4096], &[(0, 30.0)]),
            gemm_entry(&[128, 4096, 4096], &[(0, 19.0), (1, 21.0)]),
        ];
        assert_eq!(
            pick_tiled(&h200, &table, &[500, 4096, 4096], TILINGS, false),
            Some(0)
        );
        // Equal (rounded) times at one entry: its ranking decides, then the lower index.
        let tie = [gemm_entry(&[128, 4096, 4096], &[(1, 20.0), (0, 20.0)])];
        assert_eq!(
            pick_tiled(&h200, &tie, &[128, 4096, 4096], TILINGS, false),
            Some(1)
        );
        let tie = [
            gemm_entry(&[128, 4096, 4096], &[(1, 20.0)]),
            gemm_entry(&[128, 4096, 4096], &[(0, 20.0)]),
        ];
        assert_eq!(
            pick_tiled(&h200, &tie, &[128, 4096, 4096], TILINGS, false),
            Some(0)
        );
    }

    #[test]
    fn tiled_pick_needs_a_near_entry_and_members_it_knows() {
        let h200 = device("NVIDIA H200", 9, 0);
        let table = [gemm_entry(&[128, 4096, 4096], &[(5, 1.0), (2, 19.0)])];
        // Member 5 has no tiling: only member 2 is predicted.
        assert_eq!(
            pick_tiled(&h200, &table, &[128, 4096, 4096], TILINGS, false),
            Some(2)
        );
        // Too far in one dimension, another rank, another GPU, no entries: the rules decide.
        assert_eq!(
            pick_tiled(&h200, &table, &[4096, 4096, 4096], TILINGS, false),
            None
        );
        assert_eq!(
            pick_tiled(&h200, &table, &[128, 4096], TILINGS, false),
            None
        );
        let a100 = device("NVIDIA A100-SXM4-80GB", 8, 0);
        assert_eq!(
            pick_tiled(&a100, &table, &[128, 4096, 4096], TILINGS, false),
            None
        );
        assert_eq!(
            pick_tiled(&h200, &[], &[128, 4096, 4096], TILINGS, false),
            None
        );
        // Times that are not numbers are skipped, never compared.
        let odd = [gemm_entry(&[128, 4096, 4096], &[(0, f64::NAN), (1, 21.0)])];
        assert_eq!(
            pick_tiled(&h200, &odd, &[128, 4096, 4096], TILINGS, false),
            Some(1)
        );
        // A zero size matches no measured shape.
        assert_eq!(
            pick_tiled(&h200, &table, &[0, 4096, 4096], TILINGS, false),
            None
        );
    }

    #[test]
    fn where_the_rules_rank_by_cost_only_near_entries_decide() {
        let h200 = device("NVIDIA H200", 9, 0);
        let table = [gemm_entry(&[128, 8192, 4096], &[(0, 30.0), (1, 33.0)])];
        let near = |shape: &[u64]| pick_tiled(&h200, &table, shape, TILINGS, true);
        assert_eq!(near(&[128, 8192, 4096]), Some(0));
        // 140 rows, 0.13 away: still predicted by rounds (192 tiles of 64 rows need a second
        // round, 128 of 128 rows do not).
        assert_eq!(near(&[140, 8192, 4096]), Some(1));
        // 5000 deep, 0.29 away, and 4x the rows: past the limit, so the rules decide.
        assert_eq!(near(&[128, 8192, 5000]), None);
        assert_eq!(near(&[512, 8192, 4096]), None);
        // Without the cost model, the whole MAX_RATIO counts.
        assert_eq!(
            pick_tiled(&h200, &table, &[512, 8192, 4096], TILINGS, false),
            Some(1)
        );
    }

    #[test]
    fn names_are_cut_at_character_boundaries() {
        let long = "é".repeat(100);
        let n = DeviceName::new(&long);
        assert!(n.as_str().len() <= DeviceName::CAPACITY);
        assert!(n.as_str().chars().all(|c| c == 'é'));
        assert_eq!(DeviceName::new("NVIDIA H200").as_str(), "NVIDIA H200");
        assert_eq!(DeviceName::unknown().as_str(), "");
    }
}
