//! `volley mpicc` and `volley mpicxx`: compile and link C and C++ MPI programs against volley's
//! mpi.h and libmpi.so, as MPICH's and Open MPI's wrappers do.
//!
//! The wrapper finds what it needs next to the `volley` binary: `libmpi.so` (built with it by
//! `cargo build --release --workspace`), and writes `include/mpi.h` (the header, built into this
//! binary so the two always match) and `pkgconfig/volley-mpi.pc` there. It then runs the system
//! compiler (`cc` or `c++`; VOLLEY_MPICC_CC / VOLLEY_MPICXX_CXX choose another) with the
//! include path, the library and an rpath, so the program runs without LD_LIBRARY_PATH.
//! `-show` / `--showme` print the command instead of running it; `-showme:compile`, `:link` (Open
//! MPI's) and `-compile-info`, `-link-info` (MPICH's) print what build systems ask for.

use std::path::{Path, PathBuf};
use std::process::Command;

const MPI_H: &str = include_str!("../../volley-mpi/include/mpi.h");

/// Where the binary lives: libmpi.so, include/ and pkgconfig/ are beside it.
fn home() -> Result<PathBuf, String> {
    let exe = std::env::current_exe().map_err(|e| format!("cannot find the volley binary: {e}"))?;
    let exe = exe.canonicalize().unwrap_or(exe);
    Ok(exe.parent().expect("a file has a directory").to_path_buf())
}

/// Writes `content` to `path` unless it is there already (so a read-only install works).
fn ensure(path: &Path, content: &str) -> Result<(), String> {
    if std::fs::read_to_string(path).ok().as_deref() == Some(content) {
        return Ok(());
    }
    std::fs::create_dir_all(path.parent().expect("has a parent"))
        .and_then(|_| {
            let tmp = path.with_extension(format!("tmp{}", std::process::id()));
            std::fs::write(&tmp, content)?;
            std::fs::rename(&tmp, path)
        })
        .map_err(|e| format!("cannot write {}: {e}", path.display()))
}

/// The pkg-config file for volley's MPI.
fn pc(dir: &Path) -> String {
    format!(
        "prefix={}\nincludedir=${{prefix}}/include\nlibdir=${{prefix}}\n\nName: volley-mpi\nDescription: volley's MPI (libmpi.so and mpi.h)\nVersion: {}\nCflags: -I${{includedir}}\nLibs: -L${{libdir}} -Wl,-rpath,${{libdir}} -lmpi\n",
        dir.display(),
        env!("CARGO_PKG_VERSION")
    )
}

/// Prepares include/ and pkgconfig/ beside the binary; the directory.
pub fn prepare() -> Result<PathBuf, String> {
    let dir = home()?;
    let lib = dir.join("libmpi.so");
    if !lib.exists() {
        return Err(format!(
            "{} is missing: build volley's MPI library with `cargo build --release --workspace` (or `-p volley-mpi`) first",
            lib.display()
        ));
    }
    ensure(&dir.join("include").join("mpi.h"), MPI_H)?;
    ensure(&dir.join("pkgconfig").join("volley-mpi.pc"), &pc(&dir))?;
    Ok(dir)
}

/// Runs the wrapper for C (`cxx` false) or C++; returns the exit code.
pub fn run(cxx: bool, args: Vec<String>) -> i32 {
    let dir = match prepare() {
        Ok(d) => d,
        Err(e) => {
            eprintln!("volley {}: {e}", if cxx { "mpicxx" } else { "mpicc" });
            return 1;
        }
    };
    let (var, default) = if cxx {
        ("VOLLEY_MPICXX_CXX", "c++")
    } else {
        ("VOLLEY_MPICC_CC", "cc")
    };
    let compiler = std::env::var(var).unwrap_or_else(|_| default.to_string());
    let inc = format!("-I{}", dir.join("include").display());
    let libs = [
        format!("-L{}", dir.display()),
        format!("-Wl,-rpath,{}", dir.display()),
        "-lmpi".to_string(),
    ];
    // What build systems ask a wrapper (CMake's FindMPI, Meson, autoconf macros): Open MPI's
    // -showme:<what> print flags or lists alone; MPICH's -compile-info and -link-info print
    // the command that compiles or that links.
    if let Some(what) = args.first().and_then(|a| {
        a.strip_prefix("-showme:")
            .or_else(|| a.strip_prefix("--showme:"))
    }) {
        let out = match what {
            "compile" => inc.clone(),
            "link" => libs.join(" "),
            "command" => compiler.clone(),
            "incdirs" => dir.join("include").display().to_string(),
            "libdirs" => dir.display().to_string(),
            "libs" => "mpi".to_string(),
            "version" => format!("volley {} {}", if cxx { "mpicxx" } else { "mpicc" }, env!("CARGO_PKG_VERSION")),
            "help" => "-showme:compile, :link, :command, :incdirs, :libdirs, :libs, :version print what the wrapper adds; -show prints the whole command".to_string(),
            other => {
                eprintln!("volley {}: -showme:{other} is not known: -showme:compile, :link, :command, :incdirs, :libdirs, :libs, :version or :help", if cxx { "mpicxx" } else { "mpicc" });
                return 1;
            }
        };
        println!("{out}");
        return 0;
    }
    match args.first().map(String::as_str) {
        Some("-compile-info" | "-compile_info") => {
            println!("{compiler} {inc}");
            return 0;
        }
        Some("-link-info" | "-link_info") => {
            println!("{compiler} {inc} {}", libs.join(" "));
            return 0;
        }
        _ => {}
    }
    let show = args
        .iter()
        .any(|a| a == "-show" || a == "--showme" || a == "-showme");
    let user: Vec<String> = args
        .into_iter()
        .filter(|a| a != "-show" && a != "--showme" && a != "-showme")
        .collect();
    // Compiling only (-c, -E, -S, -M): no link flags.
    let link = !user
        .iter()
        .any(|a| matches!(a.as_str(), "-c" | "-E" | "-S" | "-M" | "-MM"));
    let mut cmd = vec![compiler];
    cmd.push(inc);
    cmd.extend(user.iter().cloned());
    // `-show` alone prints the whole link command, as MPICH's does (CMake's FindMPI reads the
    // libraries from it); a bare `mpicc` runs the compiler as it is, to say what is missing.
    if link && (show || !user.is_empty()) {
        cmd.extend(libs);
    }
    if show {
        println!("{}", cmd.join(" "));
        return 0;
    }
    match Command::new(&cmd[0]).args(&cmd[1..]).status() {
        Ok(s) => s.code().unwrap_or(1),
        Err(e) => {
            eprintln!(
                "volley {}: cannot run the compiler {:?}: {e}; install it (e.g. `apt-get install gcc`) or set {var}",
                if cxx { "mpicxx" } else { "mpicc" },
                cmd[0]
            );
            127
        }
    }
}
