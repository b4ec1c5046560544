//! include/volley.h is what cbindgen makes of src/lib.rs: a change to the C API that forgot the
//! header fails here. `VOLLEY_UPDATE_HEADER=1 cargo test -p volley-capi --test header` rewrites it.

use std::path::Path;

#[test]
fn the_checked_in_header_is_current() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let cfg = cbindgen::Config::from_file(dir.join("cbindgen.toml")).expect("cbindgen.toml");
    let mut out = Vec::new();
    cbindgen::Builder::new()
        .with_crate(dir)
        .with_config(cfg)
        .generate()
        .expect("cbindgen could not read the crate")
        .write(&mut out);
    let path = dir.join("include/volley.h");
    if std::env::var_os("VOLLEY_UPDATE_HEADER").is_some() {
        std::fs::write(&path, &out).unwrap();
    }
    let have = std::fs::read(&path).unwrap_or_default();
    assert!(
        have == out,
        "{} is not what cbindgen makes of src/lib.rs: regenerate it with\n  VOLLEY_UPDATE_HEADER=1 cargo test -p volley-capi --test header",
        path.display()
    );
}
