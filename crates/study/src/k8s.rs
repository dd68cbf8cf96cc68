//! A study as a Kubernetes Indexed Job (`ullstack study NAME --k8s N --dry-run`).
//!
//! The same shape as the Slurm array (see `slurm`): an Indexed Job (`completionMode: Indexed`,
//! `completions: N`, `parallelism: N`) whose pod I runs `ullstack study NAME --shard auto/N
//! --out /results/study/NAME/shards/task-I`. Kubernetes gives each pod its index as
//! `JOB_COMPLETION_INDEX` (also substituted into the arguments as `$(JOB_COMPLETION_INDEX)`)
//! but not the count, hence `auto/N`. A second Job merges the shards; Kubernetes has no
//! dependency between Jobs, so it is applied after the first completes:
//!
//! ```text
//! kubectl apply -f shards.yaml
//! until kubectl get job/ullstack-ull-shards -o jsonpath='{.status.conditions[*].type}' \
//!     | grep -qE 'Complete|Failed'; do sleep 10; done
//! kubectl apply -f merge.yaml        # if the Job ended Complete
//! ```
//!
//! (Not `kubectl wait --for=condition=complete` alone: when an index fails the Job ends with
//! condition `Failed`, and that wait blocks until its timeout.) `backoffLimitPerIndex: 1`
//! retries a failed index once without restarting the others; it needs Kubernetes ≥ 1.29
//! (beta there, GA in 1.33). A Job's spec cannot change and a finished Job is not rerun by
//! applying it again, so a rerun after a failure is `kubectl delete job ullstack-ull-shards`
//! then `kubectl apply -f shards.yaml`; each index resumes its folder, as with Slurm, and the
//! failed indices are in the old Job's `.status.failedIndexes`. Both Jobs mount one
//! ReadWriteMany PersistentVolumeClaim, `ullstack-results`, at `/results`; the image
//! (`ullstack:latest` unless `--image` says otherwise) must hold the `ullstack` binary on PATH.
//! ullstack writes the manifests; it does not talk to a cluster.

use std::path::Path;

use crate::plan::{Plan, Size};
use crate::studies::StudyDef;

/// The image the pods run unless `--image` names another (it must hold `ullstack` on PATH).
pub const DEFAULT_IMAGE: &str = "ullstack:latest";

/// Where the results volume is mounted in the pods.
pub const RESULTS_MOUNT: &str = "/results";

fn study_args(def: &StudyDef, plan: &Plan) -> Vec<String> {
    let mut v = vec!["study".to_string(), def.name.to_string()];
    if plan.size == Size::Quick {
        v.push("--quick".into());
    }
    v.push("--seed".into());
    v.push(plan.seed.to_string());
    if plan.replicates != Plan::new(plan.size, plan.seed).replicates {
        v.push("--replicates".into());
        v.push(plan.replicates.to_string());
    }
    v
}

fn yaml_list(items: &[String], indent: usize) -> String {
    items
        .iter()
        .map(|a| format!("{}- \"{}\"\n", " ".repeat(indent), a.replace('"', "\\\"")))
        .collect()
}

fn job(name: &str, image: &str, spec_lines: &str, args: &[String]) -> String {
    format!(
        "apiVersion: batch/v1\n\
         kind: Job\n\
         metadata:\n  name: {name}\n\
         spec:\n{spec_lines}  template:\n    spec:\n      restartPolicy: Never\n      containers:\n\
         \x20       - name: ullstack\n          image: {image}\n          command: [\"ullstack\"]\n          args:\n{args}\
         \x20         volumeMounts:\n            - name: results\n              mountPath: {RESULTS_MOUNT}\n\
         \x20     volumes:\n        - name: results\n          persistentVolumeClaim:\n            claimName: ullstack-results\n",
        args = yaml_list(args, 12),
    )
}

/// The Indexed Job running the shards.
pub fn shards_manifest(def: &StudyDef, plan: &Plan, tasks: usize, image: &str) -> String {
    let (size, seed) = (plan.size, plan.seed);
    let out = format!(
        "{RESULTS_MOUNT}/study/{}/shards/task-$(JOB_COMPLETION_INDEX)",
        def.name
    );
    let mut args = study_args(def, plan);
    args.extend([
        "--jobs".into(),
        "1".into(),
        "--shard".into(),
        format!("auto/{tasks}"),
        "--quiet".into(),
        "--out".into(),
        out,
    ]);
    let spec = format!(
        "  completionMode: Indexed\n  completions: {tasks}\n  parallelism: {tasks}\n  backoffLimitPerIndex: 1\n"
    );
    format!(
        "# ullstack study {} ({}, seed {seed}) as a Kubernetes Indexed Job of {tasks} pods; then merge.yaml.\n{}",
        def.name,
        size.as_str(),
        job(&format!("ullstack-{}-shards", def.name), image, &spec, &args)
    )
}

/// The Job joining the shards into `/results/study/NAME`.
pub fn merge_manifest(def: &StudyDef, tasks: usize, image: &str) -> String {
    let base = format!("{RESULTS_MOUNT}/study/{}", def.name);
    let mut args = vec!["study".to_string(), "merge".to_string()];
    args.extend((0..tasks).map(|i| format!("{base}/shards/task-{i}")));
    args.extend(["--out".into(), base, "--quiet".into()]);
    format!(
        "# Apply after the shards Job ended with condition Complete (not Failed: see .status.failedIndexes):\n# kubectl get job/ullstack-{}-shards -o jsonpath='{{.status.conditions[*].type}}'\n{}",
        def.name,
        job(
            &format!("ullstack-{}-merge", def.name),
            image,
            "  backoffLimit: 1\n",
            &args
        )
    )
}

/// Writes `shards.yaml` and `merge.yaml` into `dir`.
pub fn write(
    def: &StudyDef,
    plan: &Plan,
    tasks: usize,
    image: &str,
    dir: &Path,
) -> Result<(), String> {
    if tasks == 0 {
        return Err("--k8s 0: expected at least 1 task".into());
    }
    std::fs::create_dir_all(dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
    for (name, text) in [
        ("shards.yaml", shards_manifest(def, plan, tasks, image)),
        ("merge.yaml", merge_manifest(def, tasks, image)),
    ] {
        let p = dir.join(name);
        std::fs::write(&p, text).map_err(|e| format!("writing {}: {e}", p.display()))?;
    }
    Ok(())
}

/// What to do with the manifests [`write`] put into `dir` for study `name`'s `shards` pods:
/// the kubectl commands that apply them in order, and what a rerun needs.
pub fn instructions(dir: &Path, shards: usize, name: &str) -> String {
    format!(
        "wrote {dir}/shards.yaml ({shards} indexed pods) and {dir}/merge.yaml; results in the PVC `ullstack-results` at {mount}/study/{name}:\n  \
         kubectl apply -f {dir}/shards.yaml\n  \
         until kubectl get job/ullstack-{name}-shards -o jsonpath='{{.status.conditions[*].type}}' | grep -qE 'Complete|Failed'; do sleep 10; done\n  \
         kubectl apply -f {dir}/merge.yaml      (if it ended Complete; if Failed, see .status.failedIndexes)\n\
         A rerun (after a failure) needs the old Job gone first: kubectl delete job ullstack-{name}-shards; each index then resumes its folder.\n\
         backoffLimitPerIndex (one retry per index) needs Kubernetes >= 1.29.",
        dir = dir.display(),
        mount = RESULTS_MOUNT,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_indexed_job_passes_index_and_count() {
        let def = crate::studies::find("ull").unwrap();
        let m = shards_manifest(&def, &Plan::new(Size::Quick, 3), 4, "reg/ullstack:1");
        for want in [
            "completionMode: Indexed",
            "completions: 4",
            "parallelism: 4",
            "\"auto/4\"",
            "task-$(JOB_COMPLETION_INDEX)",
            "\"--quick\"",
            "image: reg/ullstack:1",
            "claimName: ullstack-results",
        ] {
            assert!(m.contains(want), "manifest lacks {want}:\n{m}");
        }
        let merge = merge_manifest(&def, 4, "i");
        assert!(merge.contains("task-3\"") && !merge.contains("task-4"));
    }

    #[test]
    fn zero_tasks_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let def = crate::studies::find("ull").unwrap();
        let e = write(&def, &Plan::new(Size::Quick, 1), 0, "i", dir.path()).unwrap_err();
        assert!(e.contains("--k8s 0"), "{e}");
    }
}
