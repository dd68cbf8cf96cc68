//! `--shard auto`: which shard this process is, read from an array-job engine's environment.
//!
//! An array job starts the same command N times and tells each copy its index through the
//! environment. Two engines are recognised, in this order:
//!
//! - **Slurm** job arrays (`sbatch --array`): `SLURM_ARRAY_TASK_ID` is the index. The count is
//!   `SLURM_ARRAY_TASK_COUNT`, which is the shard count only when the array is exactly 0..N-1
//!   (`SLURM_ARRAY_TASK_MIN` = 0 and `SLURM_ARRAY_TASK_MAX` = N-1); an array of some indices
//!   only (`--array=2,5`, as `--slurm` submits to redo missing shards) must give the count:
//!   `--shard auto/N`.
//! - **Kubernetes Indexed Jobs** (`completionMode: Indexed`): `JOB_COMPLETION_INDEX` is the index;
//!   Kubernetes does not export the completion count, so it must be given: `--shard auto/N`.
//!
//! The result says which variables it used, and the CLI prints it, so a misrouted task is
//! visible in its log rather than silently running another task's share.
//!
//! Worked example: Slurm runs `ullstack study ull --shard auto` as array task 2 of
//! `--array=0-3`: the environment has `SLURM_ARRAY_TASK_ID=2`, `SLURM_ARRAY_TASK_COUNT=4`,
//! `SLURM_ARRAY_TASK_MIN=0`, `SLURM_ARRAY_TASK_MAX=3`, so this process is shard 2/4 and runs
//! runs 2, 6, 10, …

use crate::results::ShardInfo;

/// A shard read from the environment, and where from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AutoShard {
    pub shard: ShardInfo,
    /// E.g. `SLURM_ARRAY_TASK_ID=2, SLURM_ARRAY_TASK_COUNT=4`.
    pub source: String,
}

/// Whether a `--shard` value asks for the environment (`auto` or `auto/N`).
pub fn is_auto(spec: &str) -> bool {
    spec == "auto" || spec.starts_with("auto/")
}

/// Resolves `auto` or `auto/N` with `env` (a lookup such as `std::env::var(..).ok()`).
pub fn resolve(spec: &str, env: &dyn Fn(&str) -> Option<String>) -> Result<AutoShard, String> {
    let given_count = match spec.strip_prefix("auto") {
        Some("") => None,
        Some(rest) => {
            let n = rest.strip_prefix('/').and_then(|n| n.parse::<usize>().ok());
            match n {
                Some(n) if n > 0 => Some(n),
                _ => {
                    return Err(format!(
                        "--shard `{spec}`: expected `auto` or `auto/N` with N ≥ 1 (N = the number of tasks)"
                    ))
                }
            }
        }
        None => return Err(format!("--shard `{spec}`: not an `auto` shard")),
    };
    let num =
        |name: &str| -> Result<Option<usize>, String> {
            match env(name) {
                None => Ok(None),
                Some(v) => v.trim().parse::<usize>().map(Some).map_err(|_| {
                    format!("--shard {spec}: {name}=`{v}` is not a non-negative integer")
                }),
            }
        };
    let (index, source, count) = if let Some(id) = num("SLURM_ARRAY_TASK_ID")? {
        let count = match given_count {
            Some(n) => n,
            None => slurm_count(spec, &num)?,
        };
        let source = match given_count {
            Some(_) => format!("SLURM_ARRAY_TASK_ID={id}, count {count} from --shard {spec}"),
            None => format!("SLURM_ARRAY_TASK_ID={id}, SLURM_ARRAY_TASK_COUNT={count}"),
        };
        (id, source, count)
    } else if let Some(idx) = num("JOB_COMPLETION_INDEX")? {
        let count = given_count.ok_or_else(|| {
            format!(
                "--shard auto: JOB_COMPLETION_INDEX={idx} (a Kubernetes Indexed Job) does not say how many \
                 tasks there are: give the count, --shard auto/N (N = the Job's completions)"
            )
        })?;
        (
            idx,
            format!("JOB_COMPLETION_INDEX={idx}, count {count} from --shard {spec}"),
            count,
        )
    } else {
        return Err(format!(
            "--shard {spec}: no array-job index in the environment (looked for SLURM_ARRAY_TASK_ID \
             and JOB_COMPLETION_INDEX); outside an array job give the shard as I/N"
        ));
    };
    if index >= count {
        return Err(format!(
            "--shard {spec}: task index {index} is not below the task count {count} ({source})"
        ));
    }
    Ok(AutoShard {
        shard: ShardInfo { index, count },
        source,
    })
}

/// The shard count of a whole 0..N-1 Slurm array, refusing a partial one.
fn slurm_count(
    spec: &str,
    num: &dyn Fn(&str) -> Result<Option<usize>, String>,
) -> Result<usize, String> {
    let count = num("SLURM_ARRAY_TASK_COUNT")?.ok_or_else(|| {
        format!("--shard {spec}: SLURM_ARRAY_TASK_ID is set but SLURM_ARRAY_TASK_COUNT is not; give the count: --shard auto/N")
    })?;
    let (min, max) = (num("SLURM_ARRAY_TASK_MIN")?, num("SLURM_ARRAY_TASK_MAX")?);
    if min.is_some_and(|m| m != 0) || max.is_some_and(|m| m + 1 != count) {
        return Err(format!(
            "--shard {spec}: the Slurm array is not 0..{} (SLURM_ARRAY_TASK_MIN={}, SLURM_ARRAY_TASK_MAX={}, \
             SLURM_ARRAY_TASK_COUNT={count}), so its task count is not the shard count: give it, --shard auto/N",
            count.saturating_sub(1),
            min.map_or("unset".into(), |m| m.to_string()),
            max.map_or("unset".into(), |m| m.to_string()),
        ));
    }
    Ok(count)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
        move |k| {
            pairs
                .iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
        }
    }

    #[test]
    fn a_whole_slurm_array_gives_index_and_count() {
        let e = env(&[
            ("SLURM_ARRAY_TASK_ID", "2"),
            ("SLURM_ARRAY_TASK_COUNT", "4"),
            ("SLURM_ARRAY_TASK_MIN", "0"),
            ("SLURM_ARRAY_TASK_MAX", "3"),
        ]);
        let a = resolve("auto", &e).unwrap();
        assert_eq!(a.shard, ShardInfo { index: 2, count: 4 });
        assert!(
            a.source.contains("SLURM_ARRAY_TASK_COUNT=4"),
            "{}",
            a.source
        );
    }

    #[test]
    fn a_partial_slurm_array_needs_the_count() {
        // `--array=2,3` to redo two shards of four: Slurm says count 2.
        let e = env(&[
            ("SLURM_ARRAY_TASK_ID", "3"),
            ("SLURM_ARRAY_TASK_COUNT", "2"),
            ("SLURM_ARRAY_TASK_MIN", "2"),
            ("SLURM_ARRAY_TASK_MAX", "3"),
        ]);
        let err = resolve("auto", &e).unwrap_err();
        assert!(err.contains("auto/N") && err.contains("MIN=2"), "{err}");
        let a = resolve("auto/4", &e).unwrap();
        assert_eq!(a.shard, ShardInfo { index: 3, count: 4 });
    }

    #[test]
    fn kubernetes_needs_the_count_and_gets_it() {
        let e = env(&[("JOB_COMPLETION_INDEX", "1")]);
        let err = resolve("auto", &e).unwrap_err();
        assert!(
            err.contains("JOB_COMPLETION_INDEX=1") && err.contains("auto/N"),
            "{err}"
        );
        let a = resolve("auto/3", &e).unwrap();
        assert_eq!(a.shard, ShardInfo { index: 1, count: 3 });
        assert!(a.source.starts_with("JOB_COMPLETION_INDEX=1"));
    }

    #[test]
    fn bad_values_are_named() {
        let none = env(&[]);
        let err = resolve("auto", &none).unwrap_err();
        assert!(
            err.contains("SLURM_ARRAY_TASK_ID") && err.contains("I/N"),
            "{err}"
        );
        let e = env(&[("JOB_COMPLETION_INDEX", "x")]);
        assert!(resolve("auto/2", &e).unwrap_err().contains("`x`"));
        let e = env(&[("JOB_COMPLETION_INDEX", "5")]);
        assert!(resolve("auto/2", &e).unwrap_err().contains("index 5"));
        for bad in ["auto/0", "auto/x", "auto2"] {
            assert!(resolve(bad, &e).unwrap_err().contains(bad));
        }
        assert!(is_auto("auto") && is_auto("auto/3") && !is_auto("1/3"));
    }
}
