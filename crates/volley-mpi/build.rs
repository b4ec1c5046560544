//! Builds the one piece of C in the MPI face: reductions on `long double`, which Rust cannot
//! name (src/long_double.c).
fn main() {
    println!("cargo:rerun-if-changed=src/long_double.c");
    cc::Build::new()
        .file("src/long_double.c")
        .warnings(true)
        .flag_if_supported("-O2")
        .compile("volley_long_double");
}
