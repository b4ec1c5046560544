//! A machine's transfer-mode profile: which messages go by single copy, as `volley tune`
//! measured on this machine (issue 14, point 4).
//!
//! The crossover between the pipelined copy through the ring and single copy
//! (process_vm_readv) depends on the machine: on the 2-core development VM the pipeline wins at
//! every size, on a 16-core server single copy moves 64 KiB 2.5x faster from cache-hot buffers
//! and 8 MiB 1.3x slower from cold ones. No default suits both, so `volley tune` times both
//! modes, hot and cold, and writes what it found here; `World::init` reads it.
//!
//! Where: `$VOLLEY_PROFILE` if set (`none` or empty: no profile), else
//! `$XDG_CACHE_HOME/volley/profile`, else `$HOME/.cache/volley/profile`. Precedence: a setting
//! in the environment, then the profile, then the built-in default.
//!
//! The file is a flat list of `key = value` lines (a subset of TOML, comments with `#`), written
//! and read here in a few lines: every value is a number or a short string, and a parser crate
//! would add a dependency to every program linked with volley (libmpi.so among them) for it. A
//! profile that does not parse, has another format version, or was made on another machine (CPU
//! model or count differ) is ignored with a warning that says why and what to do; it never stops
//! a job.

use std::path::{Path, PathBuf};

/// Version of the file format; a profile with another is ignored ("run volley tune again").
pub const FORMAT: u32 = 1;

/// The variable that names the profile (or `none`).
pub const ENV_PROFILE: &str = "VOLLEY_PROFILE";

/// The hardware a profile belongs to: a profile made on another CPU model or count is foreign.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Hardware {
    /// `model name` from /proc/cpuinfo.
    pub cpu_model: String,
    /// Processors listed in /proc/cpuinfo (not only those this process may use).
    pub cpus: usize,
    /// The running kernel's release (recorded, not compared: a kernel update keeps a profile).
    pub kernel: String,
}

impl Hardware {
    /// This machine.
    pub fn this() -> Hardware {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        Hardware {
            cpu_model: cpuinfo
                .lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_string())
                .unwrap_or_else(|| "unknown".into()),
            cpus: cpuinfo
                .lines()
                .filter(|l| l.starts_with("processor"))
                .count()
                .max(1),
            kernel: std::fs::read_to_string("/proc/sys/kernel/osrelease")
                .map(|s| s.trim().to_string())
                .unwrap_or_default(),
        }
    }
}

/// One measured size: one-way time in microseconds of a ping-pong in each mode, from cache-hot
/// buffers (the same buffer every time) and from cold ones (a different place of a large pool
/// every time).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TunePoint {
    pub size: usize,
    pub pipe_hot_us: f64,
    pub single_hot_us: f64,
    pub pipe_cold_us: f64,
    pub single_cold_us: f64,
}

impl TunePoint {
    /// Whether single copy wins at this size. The sender cannot know whether the data is in the
    /// cache, so both temperatures count alike: single copy wins when its hot and cold times
    /// together are below the pipeline's.
    pub fn single_wins(&self) -> bool {
        self.single_hot_us + self.single_cold_us < self.pipe_hot_us + self.pipe_cold_us
    }
}

/// The single-copy range chosen from measured points: the longest run of consecutive sizes at
/// which single copy wins. Messages from its first size up to (not including) the size after
/// its last go by single copy; if the run reaches the largest size measured, larger messages
/// do too (`usize::MAX`). No win: `(usize::MAX, usize::MAX)`, never.
pub fn choose_range(points: &[TunePoint]) -> (usize, usize) {
    let mut best: Option<(usize, usize)> = None; // (start index, length)
    let mut i = 0;
    while i < points.len() {
        if !points[i].single_wins() {
            i += 1;
            continue;
        }
        let start = i;
        while i < points.len() && points[i].single_wins() {
            i += 1;
        }
        if best.is_none_or(|(_, len)| i - start > len) {
            best = Some((start, i - start));
        }
    }
    match best {
        None => (usize::MAX, usize::MAX),
        Some((start, len)) => {
            let end = start + len;
            let max = points.get(end).map_or(usize::MAX, |p| p.size);
            (points[start].size, max)
        }
    }
}

/// What `volley tune` found, and where and when.
#[derive(Clone, Debug, PartialEq)]
pub struct Profile {
    /// Seconds since the epoch when it was made.
    pub created: u64,
    /// volley's version and revision that measured it.
    pub volley: String,
    pub hardware: Hardware,
    /// The two CPUs the ping-pong ran on ("0,1"), or what is known.
    pub cpus: String,
    /// Messages of at least this many bytes go by single copy (`usize::MAX`: never)...
    pub single_copy_min: usize,
    /// ...and of fewer than this many (`usize::MAX`: no upper bound).
    pub single_copy_max: usize,
    /// Why single copy is not used at all, when it could not be measured (e.g. refused here).
    pub note: Option<String>,
    pub points: Vec<TunePoint>,
}

fn bytes_or(v: usize, word: &str) -> String {
    if v == usize::MAX {
        format!("\"{word}\"")
    } else {
        v.to_string()
    }
}

fn quote(s: &str) -> String {
    // Values are one line; quotes and backslashes would need escapes nobody writes by hand.
    let clean: String = s
        .chars()
        .map(|c| {
            if c == '"' || c == '\\' || c.is_control() {
                ' '
            } else {
                c
            }
        })
        .collect();
    format!("\"{clean}\"")
}

impl Profile {
    /// The file's text.
    pub fn to_text(&self) -> String {
        let mut t = String::new();
        t.push_str(
            "# volley transfer-mode profile, written by `volley tune`; read by every volley\n",
        );
        t.push_str(
            "# process on this machine. Run `volley tune` again to refresh it, delete it to go\n",
        );
        t.push_str("# back to the built-in defaults, or set VOLLEY_PROFILE=none to ignore it.\n");
        t.push_str(&format!("format = {FORMAT}\n"));
        t.push_str(&format!("created = {}\n", self.created));
        t.push_str(&format!("volley = {}\n", quote(&self.volley)));
        t.push_str(&format!(
            "cpu_model = {}\n",
            quote(&self.hardware.cpu_model)
        ));
        t.push_str(&format!("cpus = {}\n", self.hardware.cpus));
        t.push_str(&format!("kernel = {}\n", quote(&self.hardware.kernel)));
        t.push_str(&format!("pinned = {}\n", quote(&self.cpus)));
        t.push_str("# messages in [single_copy_min, single_copy_max) go by single copy\n");
        t.push_str(&format!(
            "single_copy_min = {}\n",
            bytes_or(self.single_copy_min, "never")
        ));
        t.push_str(&format!(
            "single_copy_max = {}\n",
            bytes_or(self.single_copy_max, "none")
        ));
        if let Some(n) = &self.note {
            t.push_str(&format!("note = {}\n", quote(n)));
        }
        t.push_str("# point = bytes, one-way us: pipelined hot, single copy hot, pipelined cold, single copy cold\n");
        for p in &self.points {
            t.push_str(&format!(
                "point = \"{} {:.3} {:.3} {:.3} {:.3}\"\n",
                p.size, p.pipe_hot_us, p.single_hot_us, p.pipe_cold_us, p.single_cold_us
            ));
        }
        t
    }

    /// Reads a profile's text; the error says what is wrong and where.
    pub fn parse(text: &str) -> Result<Profile, String> {
        let mut format = None;
        let mut p = Profile {
            created: 0,
            volley: String::new(),
            hardware: Hardware {
                cpu_model: String::new(),
                cpus: 0,
                kernel: String::new(),
            },
            cpus: String::new(),
            single_copy_min: usize::MAX,
            single_copy_max: usize::MAX,
            note: None,
            points: Vec::new(),
        };
        let (mut have_min, mut have_model, mut have_cpus) = (false, false, false);
        for (i, line) in text.lines().enumerate() {
            let n = i + 1;
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let (key, value) = line
                .split_once('=')
                .ok_or_else(|| format!("line {n}: expected `key = value`, found {line:?}"))?;
            let (key, value) = (key.trim(), value.trim());
            let string = || -> Result<String, String> {
                value
                    .strip_prefix('"')
                    .and_then(|v| v.strip_suffix('"'))
                    .map(str::to_string)
                    .ok_or_else(|| format!("line {n}: {key} must be a quoted string"))
            };
            let number = || -> Result<u64, String> {
                value
                    .parse::<u64>()
                    .map_err(|_| format!("line {n}: {key} must be a number, found {value:?}"))
            };
            let bytes = |word: &str| -> Result<usize, String> {
                if value == format!("\"{word}\"") {
                    Ok(usize::MAX)
                } else {
                    value.parse::<usize>().map_err(|_| {
                        format!("line {n}: {key} must be a number of bytes or \"{word}\", found {value:?}")
                    })
                }
            };
            match key {
                "format" => format = Some(number()?),
                "created" => p.created = number()?,
                "volley" => p.volley = string()?,
                "cpu_model" => {
                    p.hardware.cpu_model = string()?;
                    have_model = true;
                }
                "cpus" => {
                    p.hardware.cpus = number()? as usize;
                    have_cpus = true;
                }
                "kernel" => p.hardware.kernel = string()?,
                "pinned" => p.cpus = string()?,
                "single_copy_min" => {
                    p.single_copy_min = bytes("never")?;
                    have_min = true;
                }
                "single_copy_max" => p.single_copy_max = bytes("none")?,
                "note" => p.note = Some(string()?),
                "point" => {
                    let s = string()?;
                    let f: Vec<&str> = s.split_whitespace().collect();
                    let bad = || {
                        format!("line {n}: point must be \"BYTES HOT HOT COLD COLD\" (a size and four times), found {s:?}")
                    };
                    if f.len() != 5 {
                        return Err(bad());
                    }
                    let t = |k: usize| {
                        f[k].parse::<f64>()
                            .ok()
                            .filter(|v| v.is_finite() && *v >= 0.0)
                            .ok_or_else(bad)
                    };
                    p.points.push(TunePoint {
                        size: f[0].parse().map_err(|_| bad())?,
                        pipe_hot_us: t(1)?,
                        single_hot_us: t(2)?,
                        pipe_cold_us: t(3)?,
                        single_cold_us: t(4)?,
                    });
                }
                // A later version may add keys; an older volley reading them ignores them.
                _ => {}
            }
        }
        match format {
            None => return Err("no `format` line: not a volley profile".into()),
            Some(f) if f != FORMAT as u64 => {
                return Err(format!(
                    "format {f}, this volley reads format {FORMAT}: run `volley tune` again"
                ))
            }
            _ => {}
        }
        if !have_min || !have_model || !have_cpus {
            return Err("incomplete: single_copy_min, cpu_model or cpus is missing".into());
        }
        if p.single_copy_min != usize::MAX && p.single_copy_min < 64 {
            return Err(format!(
                "single_copy_min = {} is below 64 bytes (smaller messages always go inline)",
                p.single_copy_min
            ));
        }
        if p.single_copy_max <= p.single_copy_min && p.single_copy_min != usize::MAX {
            return Err(format!(
                "single_copy_max = {} is not above single_copy_min = {}",
                p.single_copy_max, p.single_copy_min
            ));
        }
        Ok(p)
    }

    /// Why this profile does not belong to `hw`, if it does not.
    pub fn foreign(&self, hw: &Hardware) -> Option<String> {
        if self.hardware.cpu_model != hw.cpu_model || self.hardware.cpus != hw.cpus {
            return Some(format!(
                "it was made on another machine ({}, {} CPUs; this one: {}, {} CPUs)",
                self.hardware.cpu_model, self.hardware.cpus, hw.cpu_model, hw.cpus
            ));
        }
        None
    }
}

/// Where the profile is looked for: None when `VOLLEY_PROFILE` says `none` (or is empty) or no
/// home directory is known.
pub fn location() -> Option<PathBuf> {
    if let Some(v) = std::env::var_os(ENV_PROFILE) {
        if v.is_empty() || v == "none" {
            return None;
        }
        return Some(PathBuf::from(v));
    }
    let base = std::env::var_os("XDG_CACHE_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME")
                .filter(|v| !v.is_empty())
                .map(|h| PathBuf::from(h).join(".cache"))
        })?;
    Some(base.join("volley").join("profile"))
}

/// The profile in force, if any, and a warning when one exists but is ignored.
#[derive(Clone, Debug, Default)]
pub struct Loaded {
    pub path: Option<PathBuf>,
    pub profile: Option<Profile>,
    pub warning: Option<String>,
}

/// Reads the profile at `path` (a missing file is no profile, and no warning unless
/// `VOLLEY_PROFILE` named it).
pub fn load_from(path: &Path, named: bool) -> Loaded {
    let ignored = |why: String| Loaded {
        path: Some(path.to_path_buf()),
        profile: None,
        warning: Some(format!(
            "volley: ignoring the profile {}: {why}; the built-in transfer-mode defaults apply \
             (run `volley tune` to make a new one, or set VOLLEY_PROFILE=none)",
            path.display()
        )),
    };
    let text = match std::fs::read(path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && !named => {
            return Loaded {
                path: Some(path.to_path_buf()),
                ..Loaded::default()
            }
        }
        Err(e) => return ignored(format!("cannot read it ({e})")),
    };
    if text.len() > 1 << 20 {
        return ignored(format!("{} bytes is too large for a profile", text.len()));
    }
    let text = match String::from_utf8(text) {
        Ok(t) => t,
        Err(_) => return ignored("it is not text".into()),
    };
    match Profile::parse(&text) {
        Err(e) => ignored(e),
        Ok(p) => match p.foreign(&Hardware::this()) {
            Some(why) => ignored(why),
            None => Loaded {
                path: Some(path.to_path_buf()),
                profile: Some(p),
                warning: None,
            },
        },
    }
}

/// The profile in force for this process (see the module's comment for where it is looked for).
pub fn load() -> Loaded {
    let named = std::env::var_os(ENV_PROFILE).is_some();
    match location() {
        None => Loaded::default(),
        Some(path) => load_from(&path, named),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pt(size: usize, pipe: f64, single: f64) -> TunePoint {
        TunePoint {
            size,
            pipe_hot_us: pipe,
            single_hot_us: single,
            pipe_cold_us: pipe,
            single_cold_us: single,
        }
    }

    fn sample() -> Profile {
        Profile {
            created: 1_795_000_000,
            volley: "0.1.0 (abc)".into(),
            hardware: Hardware::this(),
            cpus: "0,1".into(),
            single_copy_min: 65536,
            single_copy_max: 8 << 20,
            note: None,
            points: vec![pt(32768, 3.0, 4.0), pt(65536, 6.0, 5.0)],
        }
    }

    #[test]
    fn a_profile_reads_back_as_written() {
        let p = sample();
        assert_eq!(Profile::parse(&p.to_text()).unwrap(), p);
        let never = Profile {
            single_copy_min: usize::MAX,
            single_copy_max: usize::MAX,
            note: Some("process_vm_readv refused \"x\"".into()),
            ..sample()
        };
        let back = Profile::parse(&never.to_text()).unwrap();
        assert_eq!(back.single_copy_min, usize::MAX);
        assert_eq!(back.single_copy_max, usize::MAX);
        assert_eq!(back.note.as_deref(), Some("process_vm_readv refused  x "));
    }

    #[test]
    fn bad_profiles_say_what_is_wrong() {
        let good = sample().to_text();
        let cases: Vec<(String, &str)> = vec![
            ("garbage\n".into(), "expected `key = value`"),
            ("\u{0}\u{1}".into(), "expected `key = value`"),
            ("cpus = 2\n".into(), "no `format` line"),
            (
                good.replace("format = 1", "format = 99"),
                "run `volley tune` again",
            ),
            (
                good.replace("single_copy_min = 65536", "single_copy_min = lots"),
                "number of bytes",
            ),
            (
                good.replace("single_copy_min = 65536", "single_copy_min = 8"),
                "below 64",
            ),
            (
                good.replace("single_copy_max = 8388608", "single_copy_max = 100"),
                "not above",
            ),
            (good.replace("\"32768 3.000", "\"32768 x"), "point must be"),
            (
                good.replace("\"32768 3.000", "\"32768 NaN"),
                "point must be",
            ),
            (
                good.replace("\"32768 3.000 4.000 3.000 4.000\"", "\"1 2\""),
                "point must be",
            ),
            (
                good.lines()
                    .filter(|l| !l.starts_with("cpu_model"))
                    .collect::<Vec<_>>()
                    .join("\n"),
                "incomplete",
            ),
            (good.replace("cpus = ", "cpus = -"), "must be a number"),
        ];
        for (text, want) in cases {
            let e = Profile::parse(&text).expect_err(&text);
            assert!(e.contains(want), "{text:?}: {e:?} lacks {want:?}");
        }
    }

    #[test]
    fn a_profile_from_another_machine_is_foreign() {
        let hw = Hardware::this();
        assert_eq!(sample().foreign(&hw), None);
        let other = Profile {
            hardware: Hardware {
                cpu_model: "Imaginary CPU 9000".into(),
                ..hw.clone()
            },
            ..sample()
        };
        assert!(other.foreign(&hw).unwrap().contains("another machine"));
        let more = Profile {
            hardware: Hardware {
                cpus: hw.cpus + 1,
                ..hw.clone()
            },
            ..sample()
        };
        assert!(more.foreign(&hw).is_some());
    }

    #[test]
    fn the_range_is_the_longest_run_of_sizes_where_single_copy_wins() {
        // Never.
        assert_eq!(
            choose_range(&[pt(4096, 1.0, 2.0), pt(8192, 2.0, 3.0)]),
            (usize::MAX, usize::MAX)
        );
        // From 64 KiB on, to the largest size measured and beyond.
        let up = [
            pt(32768, 3.0, 4.0),
            pt(65536, 6.0, 5.0),
            pt(131072, 12.0, 8.0),
        ];
        assert_eq!(choose_range(&up), (65536, usize::MAX));
        // A window: wins at 64 KiB-1 MiB, loses again from 2 MiB (cold data at scale).
        let window = [
            pt(32768, 3.0, 4.0),
            pt(65536, 6.0, 5.0),
            pt(1 << 20, 90.0, 60.0),
            pt(2 << 20, 180.0, 200.0),
            pt(4 << 20, 400.0, 300.0), // a lone win: noise, shorter than the run
        ];
        assert_eq!(choose_range(&window), (65536, 2 << 20));
        // Hot and cold weigh alike: a hot win lost twice over when cold is no win.
        let mixed = TunePoint {
            size: 8 << 20,
            pipe_hot_us: 1100.0,
            single_hot_us: 930.0,
            pipe_cold_us: 1350.0,
            single_cold_us: 1820.0,
        };
        assert!(!mixed.single_wins());
    }

    #[test]
    fn missing_unreadable_and_foreign_files() {
        let dir = std::env::temp_dir().join(format!("volley-profile-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let missing = dir.join("absent");
        let l = load_from(&missing, false);
        assert!(l.profile.is_none() && l.warning.is_none());
        let l = load_from(&missing, true);
        assert!(l.warning.unwrap().contains("cannot read it"));
        let good = dir.join("good");
        std::fs::write(&good, sample().to_text()).unwrap();
        let l = load_from(&good, false);
        assert_eq!(l.profile, Some(sample()));
        assert!(l.warning.is_none());
        let foreign = dir.join("foreign");
        let text = sample().to_text().replace(
            &quote(&Hardware::this().cpu_model),
            "\"Imaginary CPU 9000\"",
        );
        std::fs::write(&foreign, text).unwrap();
        let w = load_from(&foreign, false).warning.unwrap();
        assert!(
            w.contains("another machine") && w.contains("volley tune"),
            "{w}"
        );
        let binary = dir.join("binary");
        std::fs::write(&binary, [0xffu8, 0xfe, 0x00]).unwrap();
        assert!(load_from(&binary, false)
            .warning
            .unwrap()
            .contains("not text"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
