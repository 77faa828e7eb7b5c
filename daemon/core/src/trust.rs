//! Which writers the webhook and the in-server gate trust as controllers: the ones a policy names, or by default
//! the control plane's own and the workload operators the platform has installed, proven by a ClusterRoleBinding
//! (which no tenant can create) made no earlier than the operator's namespace; pure.
//!
//! A name alone proves nothing: on a self-service platform a tenant can create `jobset-system`, a service account
//! `jobset-controller-manager` in it, and bind it in its own namespace (issue 49). So a default operator account
//! is trusted only while a ClusterRoleBinding binds it, and only if its namespace is no newer than that binding:
//! a namespace made again after the operator left does not inherit the trust of a binding it outlived. The
//! daemon resolves this from its caches; `render`, `explain` and `webhook --offline` from the ClusterRoleBindings
//! of the cluster file. docs/admission.md "Who is trusted, and why".

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::policy::{CONTROL_PLANE_CONTROLLERS, TierPolicy};
use crate::view::NamespaceView;
pub use crate::view::{BindingView, InstalledOperators};

/// The operators trusted by default, each at the namespace and service account of its upstream release install,
/// but only once installed ([`InstalledOperators`]): Kueue and the operators of the workload kinds Kueue integrates.
pub const DEFAULT_OPERATOR_ACCOUNTS: &[&str] = &[
    "system:serviceaccount:kueue-system:kueue-controller-manager",
    "system:serviceaccount:jobset-system:jobset-controller-manager",
    "system:serviceaccount:lws-system:lws-controller-manager",
    "system:serviceaccount:appwrapper-system:appwrapper-controller-manager",
    "system:serviceaccount:kubeflow-system:kubeflow-trainer-controller-manager",
];

/// The user-name prefix of service accounts.
const SERVICE_ACCOUNT_PREFIX: &str = "system:serviceaccount:";

/// The default operator accounts that some binding of `bindings` binds, whose namespace is among `namespaces` and
/// was made no later than that binding (a missing timestamp, only ever in a cluster file, does not count against
/// it).
pub fn find_installed_operators<'a>(
    bindings: impl IntoIterator<Item = &'a BindingView>,
    namespaces: &BTreeMap<String, Arc<NamespaceView>>,
) -> InstalledOperators {
    let bindings: Vec<&BindingView> = bindings.into_iter().collect();
    let mut installed = InstalledOperators::default();
    for account in DEFAULT_OPERATOR_ACCOUNTS {
        let Some(namespace) = account_namespace(account).and_then(|name| namespaces.get(name)) else {
            continue;
        };
        let binding_times: Vec<Option<i64>> = bindings
            .iter()
            .filter(|binding| binding.service_accounts.iter().any(|bound| bound == account))
            .map(|binding| binding.created)
            .collect();
        if binding_times.is_empty() {
            continue;
        }
        let trusted = binding_times.iter().any(|binding_made| match (namespace.created, binding_made) {
            (Some(namespace_made), Some(binding_made)) => namespace_made <= *binding_made,
            _ => true,
        });
        let list = if trusted { &mut installed.accounts } else { &mut installed.newer_namespaces };
        list.insert((*account).to_owned());
    }
    installed
}

/// The namespace of a service account's user name.
fn account_namespace(user: &str) -> Option<&str> {
    user.strip_prefix(SERVICE_ACCOUNT_PREFIX)?.split_once(':').map(|(namespace, _)| namespace)
}

/// The controllers trusted when a policy names none: the control plane's, then the installed operators.
pub fn default_trusted_controllers(installed: &InstalledOperators) -> Vec<String> {
    CONTROL_PLANE_CONTROLLERS
        .iter()
        .copied()
        .chain(DEFAULT_OPERATOR_ACCOUNTS.iter().copied().filter(|account| installed.contains(account)))
        .map(str::to_owned)
        .collect()
}

/// `policy` as the webhook and the gate enforce it, where that differs from `policy`: a policy that names no
/// `trustedControllers` gets the defaults in force ([`default_trusted_controllers`]) written in; one that names
/// them (the platform's own choice) is served as it is (`None`).
pub fn resolve_trusted_controllers(policy: &TierPolicy, installed: &InstalledOperators) -> Option<TierPolicy> {
    if policy.spec.admission.trusted_controllers.is_some() {
        return None;
    }
    let mut resolved = policy.clone();
    resolved.spec.admission.trusted_controllers = Some(default_trusted_controllers(installed));
    Some(resolved)
}

/// [`resolve_trusted_controllers`] for a shared policy: the same `Arc` when nothing is resolved.
pub fn with_trusted_controllers(policy: &Arc<TierPolicy>, installed: &InstalledOperators) -> Arc<TierPolicy> {
    resolve_trusted_controllers(policy, installed).map_or_else(|| policy.clone(), Arc::new)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inputs::load_policy;

    const JOBSET: &str = "system:serviceaccount:jobset-system:jobset-controller-manager";

    fn namespaces(made: &[(&str, Option<i64>)]) -> BTreeMap<String, Arc<NamespaceView>> {
        made.iter()
            .map(|(name, created)| {
                let view = NamespaceView { name: (*name).to_owned(), created: *created, ..NamespaceView::default() };
                ((*name).to_owned(), Arc::new(view))
            })
            .collect()
    }

    fn binding(created: Option<i64>, accounts: &[&str]) -> BindingView {
        BindingView {
            name: "operator".to_owned(),
            created,
            service_accounts: accounts.iter().map(|account| (*account).to_owned()).collect(),
        }
    }

    #[test]
    fn an_operator_is_installed_only_when_a_cluster_role_binding_binds_it() {
        let made = namespaces(&[("jobset-system", Some(100))]);
        assert!(!find_installed_operators(&[], &made).contains(JOBSET), "a namespace and an account are no install");
        let other = binding(Some(200), &["system:serviceaccount:jobset-system:someone-else"]);
        assert!(!find_installed_operators([&other], &made).contains(JOBSET));
        let bound = binding(Some(200), &[JOBSET]);
        assert!(find_installed_operators([&bound], &made).contains(JOBSET));
    }

    #[test]
    fn a_namespace_made_after_the_binding_does_not_inherit_its_trust() {
        let bound = binding(Some(200), &[JOBSET]);
        let remade = namespaces(&[("jobset-system", Some(300))]);
        let found = find_installed_operators([&bound], &remade);
        assert!(!found.contains(JOBSET), "the namespace outlived by the binding");
        assert_eq!(found.bound_before_their_namespace().collect::<Vec<_>>(), [JOBSET], "reported, not silent");
        let same_second = namespaces(&[("jobset-system", Some(200))]);
        assert!(find_installed_operators([&bound], &same_second).contains(JOBSET), "one apply makes both");
        assert!(!find_installed_operators([&bound], &BTreeMap::new()).contains(JOBSET), "no namespace, no operator");
    }

    #[test]
    fn only_the_default_operator_accounts_are_ever_found() {
        let tenant = "system:serviceaccount:team-a:deployer";
        let bound = binding(Some(200), &[tenant]);
        let made = namespaces(&[("team-a", Some(100))]);
        assert_eq!(find_installed_operators([&bound], &made), InstalledOperators::default());
    }

    #[test]
    fn a_policy_without_trusted_controllers_gets_the_control_plane_and_the_installed_operators() {
        let policy = Arc::new(load_policy(None).unwrap());
        assert!(policy.spec.admission.trusted_controllers.is_none());
        let bound = binding(Some(200), &[JOBSET]);
        let installed = find_installed_operators([&bound], &namespaces(&[("jobset-system", Some(100))]));
        let resolved = with_trusted_controllers(&policy, &installed);
        let trusted = resolved.spec.admission.trusted_controllers.clone().unwrap();
        assert_eq!(trusted.len(), CONTROL_PLANE_CONTROLLERS.len() + 1);
        assert!(trusted.iter().any(|user| user == JOBSET));
        assert!(!trusted.iter().any(|user| user.contains("kueue-system")), "Kueue is not installed in this view");
        let nothing = with_trusted_controllers(&policy, &InstalledOperators::default());
        assert_eq!(
            nothing.spec.admission.trusted_controllers.as_deref().unwrap().len(),
            CONTROL_PLANE_CONTROLLERS.len()
        );
    }

    #[test]
    fn a_policy_naming_its_controllers_is_served_as_it_is() {
        let mut policy = load_policy(None).unwrap();
        policy.spec.admission.trusted_controllers = Some(vec![JOBSET.to_owned()]);
        let policy = Arc::new(policy);
        let resolved = with_trusted_controllers(&policy, &InstalledOperators::default());
        assert!(Arc::ptr_eq(&policy, &resolved), "the platform named it: trusted as named, not copied");
    }
}
