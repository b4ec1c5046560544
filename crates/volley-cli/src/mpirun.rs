//! `volley mpirun` / `volley mpiexec` (and the `mpirun`, `mpiexec` programs beside `volley`):
//! the options scripts written for MPICH's Hydra and Open MPI pass, translated to `volley run`.
//!
//! Accepted: `-n`/`-np`/`-c N`; `--hosts`/`-hosts`/`--host`/`-host LIST`;
//! `--hostfile`/`-hostfile`/`-f`/`--machinefile`/`-machinefile FILE`; `--bind-to core|hwthread`
//! (each rank bound to one CPU, volley's default), `socket` or `none`; `--tag-output`/`-l`/`-prepend-rank`;
//! `-genv`/`-env VAR VALUE` and `-x VAR[=VALUE]` (exported to the ranks); and, as no-ops,
//! `--oversubscribe`, `--allow-run-as-root`, `-genvall`, `--mca`/`-mca KEY VALUE` (Open MPI's
//! component choices have no meaning here). Anything else is refused with the list above, rather
//! than silently ignored.

use std::process::Command;

const ACCEPTED: &str = "-n/-np N, --hosts/-host LIST, --hostfile/-f FILE, --bind-to core|hwthread|socket|none, --tag-output/-l, -genv VAR VALUE, -x VAR[=VALUE], --oversubscribe, --allow-run-as-root, --mca KEY VALUE";

/// `volley run`'s arguments, and variables for the ranks' environment.
type Translated = (Vec<String>, Vec<(String, String)>);

/// The `volley run` arguments and environment for an mpirun command line.
pub fn translate(args: &[String]) -> Result<Translated, String> {
    let mut out: Vec<String> = Vec::new();
    let mut env = Vec::new();
    let mut i = 0;
    let value = |i: usize, opt: &str| -> Result<String, String> {
        args.get(i + 1)
            .cloned()
            .ok_or_else(|| format!("{opt} needs a value"))
    };
    while i < args.len() {
        let a = args[i].as_str();
        // Options with their value joined by '=' (--np=4) are split first.
        let (opt, joined) = match a.split_once('=') {
            Some((o, v)) if o.starts_with('-') => (o, Some(v.to_string())),
            _ => (a, None),
        };
        let take = |i: &mut usize| -> Result<String, String> {
            if let Some(v) = &joined {
                Ok(v.clone())
            } else {
                let v = value(*i, opt)?;
                *i += 1;
                Ok(v)
            }
        };
        match opt {
            "-n" | "-np" | "--np" | "-c" | "--n" => {
                let v = take(&mut i)?;
                out.extend(["-n".into(), v]);
            }
            "--hosts" | "-hosts" | "--host" | "-host" | "-H" => {
                let v = take(&mut i)?;
                out.extend(["--hosts".into(), v]);
            }
            "--hostfile" | "-hostfile" | "-f" | "--machinefile" | "-machinefile" => {
                let v = take(&mut i)?;
                out.extend(["--hostfile".into(), v]);
            }
            "--bind-to" | "-bind-to" => {
                let v = take(&mut i)?;
                let to = match v.as_str() {
                    "core" | "hwthread" | "cpu" => "core",
                    "socket" | "package" => "socket",
                    "none" => "none",
                    other => return Err(format!("--bind-to {other}: volley binds to core, hwthread, socket or none")),
                };
                out.extend(["--bind-to".into(), to.into()]);
            }
            "--tag-output" | "-tag-output" | "-l" | "-prepend-rank" | "--prepend-rank" => {
                out.push("--tag-output".into())
            }
            "-genv" | "-env" | "--genv" => {
                let var = take(&mut i)?;
                let val = value(i, opt)?;
                i += 1;
                env.push((var, val));
            }
            "-x" => {
                let spec = take(&mut i)?;
                match spec.split_once('=') {
                    Some((k, v)) => env.push((k.into(), v.into())),
                    None => {
                        // Exported as it is here: the ranks inherit the environment anyway.
                        if let Ok(v) = std::env::var(&spec) {
                            env.push((spec, v));
                        }
                    }
                }
            }
            "--oversubscribe" | "-oversubscribe" | "--allow-run-as-root" | "-genvall" => {}
            "--mca" | "-mca" | "--gmca" => {
                take(&mut i)?;
                value(i, opt)?;
                i += 1;
            }
            _ if a.starts_with('-') => {
                return Err(format!(
                    "option {a} is not one volley's mpirun knows; it accepts {ACCEPTED} (or use `volley run` directly)"
                ))
            }
            _ => {
                // The program and its arguments: passed on untouched.
                out.extend(args[i..].iter().cloned());
                return Ok((out, env));
            }
        }
        i += 1;
    }
    Err("no program to run: mpirun -n N PROGRAM [ARGS...]".into())
}

/// Runs the job; returns the exit code.
pub fn run(name: &str, args: Vec<String>) -> i32 {
    let (run_args, env) = match translate(&args) {
        Ok(x) => x,
        Err(e) => {
            eprintln!("volley {name}: {e}");
            return 2;
        }
    };
    let exe = match std::env::current_exe() {
        Ok(e) => e,
        Err(e) => {
            eprintln!("volley {name}: cannot find the volley binary: {e}");
            return 1;
        }
    };
    match Command::new(exe)
        .arg("run")
        .args(&run_args)
        .envs(env)
        .status()
    {
        Ok(s) => s.code().unwrap_or(1),
        Err(e) => {
            eprintln!("volley {name}: cannot start volley run: {e}");
            1
        }
    }
}

#[cfg(test)]
mod tests {
    use super::translate;

    fn v(s: &str) -> Vec<String> {
        s.split_whitespace().map(String::from).collect()
    }

    #[test]
    fn hydra_and_open_mpi_options_become_volley_run_options() {
        let (a, e) = translate(&v("-np 4 --oversubscribe --allow-run-as-root --mca btl self,vader -hosts a,b -genv X 1 -x Y=2 ./prog -v 3")).unwrap();
        assert_eq!(a, v("-n 4 --hosts a,b ./prog -v 3"));
        assert_eq!(e, vec![("X".into(), "1".into()), ("Y".into(), "2".into())]);
        let (a, _) = translate(&v("--np=2 --bind-to none -l prog")).unwrap();
        assert_eq!(a, v("-n 2 --bind-to none --tag-output prog"));
        let (a, _) = translate(&v("-n 2 --bind-to hwthread prog")).unwrap();
        assert_eq!(a, v("-n 2 --bind-to core prog"));
        let (a, _) = translate(&v("-n 2 -bind-to socket prog")).unwrap();
        assert_eq!(a, v("-n 2 --bind-to socket prog"));
    }

    #[test]
    fn unknown_options_and_missing_programs_are_refused() {
        assert!(translate(&v("-n 2 --frobnicate prog"))
            .unwrap_err()
            .contains("--frobnicate"));
        assert!(translate(&v("-n 2")).unwrap_err().contains("no program"));
        assert!(translate(&v("-n")).unwrap_err().contains("needs a value"));
        assert!(translate(&v("--bind-to board prog")).is_err());
    }
}
