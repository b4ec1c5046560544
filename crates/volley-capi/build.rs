//! Puts what a C program needs beside the library in the target directory (target/<profile>/):
//! include/volley.h and pkgconfig/volley.pc, so that `pkg-config --cflags --libs volley` works
//! with PKG_CONFIG_PATH=target/<profile>/pkgconfig.

use std::path::PathBuf;

fn main() {
    let manifest = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").unwrap());
    let header = manifest.join("include/volley.h");
    println!("cargo:rerun-if-changed={}", header.display());
    println!("cargo:rerun-if-changed=build.rs");
    // OUT_DIR is <target>/<profile>/build/<package>-<hash>/out.
    let out = PathBuf::from(std::env::var("OUT_DIR").unwrap());
    let Some(profile) = out.ancestors().nth(3) else {
        return;
    };
    let include = profile.join("include");
    let pc = profile.join("pkgconfig");
    std::fs::create_dir_all(&include).unwrap();
    std::fs::create_dir_all(&pc).unwrap();
    std::fs::copy(&header, include.join("volley.h")).unwrap();
    std::fs::write(
        pc.join("volley.pc"),
        format!(
            "prefix={}\nincludedir=${{prefix}}/include\nlibdir=${{prefix}}\n\nName: volley\nDescription: volley's C API: endpoints, active ports, requests (libvolley)\nVersion: {}\nCflags: -I${{includedir}}\nLibs: -L${{libdir}} -Wl,-rpath,${{libdir}} -lvolley\n",
            profile.display(),
            std::env::var("CARGO_PKG_VERSION").unwrap()
        ),
    )
    .unwrap();
}
