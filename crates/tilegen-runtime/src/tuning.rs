//! Measured dispatch: which instance of a method ran fastest on which GPU at which shape, as
//! `tilegen tune` measured it and `tilegen generate` baked it into the bindings.
//!
//! A method's plan function asks [`pick`] first. The table's entries for this device are
//! those measured on a GPU of exactly its name; when there are none, those measured on one of
//! the same compute capability; when there are none either, the method uses its fixed rules
//! (as on a GPU no table knows). Among the device's entries, the nearest shape wins:
//! distance is the sum over dimensions of |log2(call / entry)| (so 2× off in one dimension
//! costs as much as 2× off in another), and only entries within a factor of
//! [`MAX_RATIO`] in every dimension count, so a shape far from every measured one falls back
//! to the rules rather than trusting a guess. Ties go to the first entry listed. The instance
//! picked must still accept the call; when it refuses, the rules decide.

use crate::loader::Device;

/// How far (as a ratio, in each dimension) a call's shape may be from a measured one for
/// that measurement to decide.
pub const MAX_RATIO: f64 = 4.0;

/// One measurement: on the GPU named `device` (compute capability `major.minor`), at `shape`
/// (the method's size arguments in order, e.g. `[rows, cols]` or `[m, n, k]`), the method's
/// instance `member` (an index into its instance list) was the fastest.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tuned<'a> {
    pub device: &'a str,
    pub major: u32,
    pub minor: u32,
    pub shape: &'a [u64],
    pub member: usize,
}

/// The member the table picks for a call of `shape` on `device`, if any (see the module docs).
pub fn pick(device: &Device, table: &[Tuned<'_>], shape: &[u64]) -> Option<usize> {
    let name = device.name.as_str();
    let by_name = !name.is_empty() && table.iter().any(|t| t.device == name);
    let mine = |t: &&Tuned| match by_name {
        true => t.device == name,
        false => t.major == device.major && t.minor == device.minor,
    };
    let mut best: Option<(f64, usize)> = None;
    for t in table.iter().filter(mine) {
        let Some(d) = distance(shape, t.shape) else {
            continue;
        };
        if best.is_none_or(|(b, _)| d < b) {
            best = Some((d, t.member));
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
            shape: &[32768, 4096],
            member: 1,
        },
        Tuned {
            device: "NVIDIA H200",
            major: 9,
            minor: 0,
            shape: &[65536, 1024],
            member: 2,
        },
        Tuned {
            device: "NVIDIA H100 80GB HBM3",
            major: 9,
            minor: 0,
            shape: &[32768, 4096],
            member: 3,
        },
        Tuned {
            device: "NVIDIA A100-SXM4-80GB",
            major: 8,
            minor: 0,
            shape: &[32768, 4096],
            member: 4,
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
