//! `rollback.go`: the rollback asked for by the `deprecated.deployment.rollback.to` annotation
//! (what the extensions/v1beta1 rollback subresource wrote). `kubectl rollout undo` on apps/v1
//! copies the old ReplicaSet's template into the Deployment itself instead, which the rollout
//! then treats as any template change: that ReplicaSet becomes the new one again, with the next
//! revision.

use wasmloop_sdk::EventType;

use crate::annotations;
use crate::sync::{Flow, Sync};
use crate::template;

/// Reasons of the rollback Events.
const REVISION_NOT_FOUND: &str = "DeploymentRollbackRevisionNotFound";
const TEMPLATE_UNCHANGED: &str = "DeploymentRollbackTemplateUnchanged";
const ROLLED_BACK: &str = "DeploymentRollback";

impl Sync {
    /// The revision the annotation asks for (0: the previous one), if it is a number.
    pub fn rollback_to(&self) -> Option<i64> {
        self.d.metadata.annotations.get(annotations::ROLLBACK_TO).filter(|v| !v.is_empty())?.parse().ok()
    }

    /// `rollback`: the template of the ReplicaSet with that revision becomes the Deployment's
    /// (with its annotations), and the annotation is cleared.
    pub fn rollback(&mut self) -> Flow {
        let (new, old) = self.all_and_sync_revision(true)?;
        let all: Vec<usize> = old.iter().chain(new.iter()).copied().collect();
        let mut target = self.rollback_to().unwrap_or(0);
        if target == 0 {
            target = last_revision(all.iter().filter_map(|&i| self.rss[i].revision().ok()));
            if target == 0 {
                self.event(EventType::Warning, REVISION_NOT_FOUND, "Unable to find last revision.".into());
                self.clear_rollback_to();
                return Ok(());
            }
        }
        for i in all {
            if self.rss[i].revision().ok() != Some(target) {
                continue;
            }
            let rs_template = self.rss[i].spec.template.clone();
            if template::equal_ignore_hash(&self.d.spec.template, &rs_template) {
                let msg = format!("The rollback revision contains the same template as current deployment {:?}", self.d.metadata.name);
                self.event(EventType::Warning, TEMPLATE_UNCHANGED, msg);
            } else {
                self.d.spec.template = template::without_hash(&rs_template);
                let rs_annotations = self.rss[i].metadata.annotations.clone();
                annotations::set_deployment_to(&mut self.d.metadata.annotations, &rs_annotations);
                let msg = format!("Rolled back deployment {:?} to revision {target}", self.d.metadata.name);
                self.event(EventType::Normal, ROLLED_BACK, msg);
            }
            self.clear_rollback_to();
            return Ok(());
        }
        self.event(EventType::Warning, REVISION_NOT_FOUND, "Unable to find the revision to rollback to.".into());
        self.clear_rollback_to();
        Ok(())
    }

    /// `updateDeploymentAndClearRollbackTo`.
    fn clear_rollback_to(&mut self) {
        self.d.metadata.annotations.remove(annotations::ROLLBACK_TO);
        self.update_deployment();
    }
}

/// `LastRevision`: the second highest revision (the one before the current).
fn last_revision(revisions: impl Iterator<Item = i64>) -> i64 {
    let (mut max, mut second) = (0, 0);
    for v in revisions {
        if v >= max {
            second = max;
            max = v;
        } else if v > second {
            second = v;
        }
    }
    second
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_last_revision_is_the_one_before_the_highest() {
        assert_eq!(super::last_revision([1, 3, 2].into_iter()), 2);
        assert_eq!(super::last_revision([4].into_iter()), 0);
        assert_eq!(super::last_revision([2, 2].into_iter()), 2);
    }
}
