//! Generates the demo's kernel library into `$OUT_DIR/tilegen` (no GPU needed: NVRTC compiles
//! the kernels, and the shared cache keeps them between clean builds).

fn main() {
    tilegen::Builder::new().specs("specs").compile();
}
