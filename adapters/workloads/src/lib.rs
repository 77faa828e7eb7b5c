//! Workload-kind adapters: where each kind keeps its pod template(s), how it is suspended, whether tiergate queues
//! it in Kueue and which fields it never patches on UPDATE; pure functions over `serde_json::Value`, no I/O.
//!
//! Every kind is one [`WorkloadAdapter`] row in [`ADAPTERS`]; adding a kind is adding one row. The functions work
//! on the raw JSON object so no field tiergate does not know about is ever lost.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use serde_json::Value;

/// Label Kueue reads the LocalQueue name from.
pub const QUEUE_NAME_LABEL: &str = "kueue.x-k8s.io/queue-name";
/// Label Kueue reads the WorkloadPriorityClass from.
pub const PRIORITY_CLASS_LABEL: &str = "kueue.x-k8s.io/priority-class";
/// Label Kueue reads a workload's maximum execution time from, in seconds (copied to the Workload's
/// `spec.maximumExecutionTimeSeconds`; Kueue deactivates the workload once it has been admitted that long).
pub const MAX_EXEC_TIME_LABEL: &str = "kueue.x-k8s.io/max-exec-time-seconds";

/// Kueue's label (and finalizer) on the pods its pod integration manages.
pub const KUEUE_MANAGED_LABEL: &str = "kueue.x-k8s.io/managed";
/// The scheduling gate Kueue's pod integration holds a pod with until it is admitted.
pub const KUEUE_ADMISSION_GATE: &str = "kueue.x-k8s.io/admission";

/// Controllers of pods that are not workloads: a mirror pod's Node.
const NOT_WORKLOAD_OWNERS: &[(&str, &str)] = &[("", "Node")];

/// Where one pod template lives inside an object, as JSON pointers (RFC 6901).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodTemplatePointers {
    /// The template's `metadata` (for a Pod, the Pod's own metadata).
    pub metadata: String,
    /// The `PodSpec`.
    pub spec: String,
}

/// Where one pod template sits, as a pointer pattern: `*` stands for every element of an array or every value of
/// a map (the Kubeflow `*ReplicaSpecs` maps are keyed by replica type).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TemplateAt {
    /// A `PodTemplateSpec` (`metadata` and `spec` below the pointer); its `*`s stand for array elements.
    PodTemplate(&'static str),
    /// A `PodTemplateSpec` in a map keyed by replica type (the Kubeflow `*ReplicaSpecs`): its `*` stands for every
    /// map value. The webhook expands it as [`TemplateAt::PodTemplate`]; the in-server gate's CEL iterates a map
    /// differently from a list, so the table says which it is.
    ReplicaMap(&'static str),
    /// An object carrying pod fields flat, with `labels`, `annotations`, `nodeSelector`, `tolerations` and a
    /// `gpu: {name, quantity}` request at the same level (SparkApplication's `driver` and `executor`).
    Flat(&'static str),
}

/// How a kind nests its pod templates.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TemplateLayout {
    /// The object is itself a Pod: `/metadata` and `/spec`.
    Pod,
    /// One template at a fixed pointer (the template object holding `metadata` and `spec`).
    Single(&'static str),
    /// One template per element of an array, at `item` below each element (JobSet `replicatedJobs`).
    PerItem {
        /// Pointer to the array.
        list: &'static str,
        /// Pointer to the template object inside each element.
        item: &'static str,
    },
    /// Every template matching one of the patterns, in pattern order (head and worker groups, replica specs,
    /// leader and worker templates).
    Patterns(&'static [TemplateAt]),
    /// Objects of other kinds embedded at `item` below each element of `list` (AppWrapper `components`): each
    /// embedded object's templates are found through the layout of its own kind; an embedded kind tiergate does not
    /// know is searched for every object with a `containers` array (see [`unknown_embedded_kinds`]).
    Embedded {
        /// Pointer to the array.
        list: &'static str,
        /// Pointer to the embedded object inside each element.
        item: &'static str,
    },
}

/// How tiergate hands a kind to Kueue.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Queueing {
    /// Kueue manages the kind through `kueue.x-k8s.io/queue-name` (on the metadata at
    /// [`WorkloadAdapter::queue_labels_at`]) and gates it with a `suspend` field: tiergate sets the tier's
    /// LocalQueue when absent and `suspend: true` on CREATE (Job, JobSet, Ray, Kubeflow, MPIJob, TrainJob,
    /// AppWrapper, SparkApplication; for a CronJob both go on the job template, so every Job it spawns carries them).
    SuspendedWithQueueLabel {
        /// Pointer to the boolean `suspend` field.
        suspend: &'static str,
    },
    /// Kueue manages the kind but cannot suspend it: it gates the kind's pods as pod groups (LeaderWorkerSet).
    /// tiergate puts the queue label on the object and, as Kueue's own webhook for the kind would, the queue and
    /// priority labels and the given annotations on every pod template, so each pod is created labelled and Kueue's
    /// pod webhook gates it whatever order the webhooks run in (Kueue's webhooks are not reinvoked).
    PodGroupWithQueueLabel {
        /// Annotations Kueue's webhook for the kind puts on every pod template.
        template_annotations: &'static [(&'static str, &'static str)],
    },
    /// tiergate does not queue the kind itself: it only sets GPU class, placement and annotations. Kueue may
    /// still manage it when the user labels it (Deployment/StatefulSet/plain Pod integrations need Kueue's pod
    /// integration and its scheduling gate, which tiergate does not add), and pods owned by a queued kind are
    /// accounted through their owner.
    NotQueued,
}

/// One workload kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WorkloadAdapter {
    /// API group (`""` for core).
    pub group: &'static str,
    /// API version: the one Kueue v0.19.2 integrates (the webhook is registered with `matchPolicy: Equivalent`, so
    /// other served versions arrive converted to it).
    pub version: &'static str,
    /// Kind.
    pub kind: &'static str,
    /// Where the pod templates are.
    pub templates: TemplateLayout,
    /// How Kueue gets the workload.
    pub queueing: Queueing,
    /// Pointer to the metadata whose labels carry the queue and priority labels: `/metadata`, except for a CronJob
    /// (`/spec/jobTemplate/metadata`: Kueue manages the Jobs, which copy the template's labels).
    pub queue_labels_at: &'static str,
    /// `ResourceRequirements` outside any pod template that size the kind's pods (TrainJob
    /// `spec.trainer.resourcesPerNode`; its pod template lives in the referenced runtime). When one of them asks
    /// for a GPU, every template of the object counts as a GPU template.
    pub resources_outside_templates: &'static [&'static str],
    /// Pointers tiergate never changes on UPDATE: fields Kubernetes makes immutable after creation, and fields
    /// whose change would disturb a running workload (suspending a running Job, moving it between queues).
    pub immutable_on_update: &'static [&'static str],
    /// Where the kind names the controller that runs it, when Kueue's MultiKueue can dispatch it to a worker.
    pub managed_by: Option<ManagedBy>,
    /// The kind's pod sets as Kueue counts them for topology-aware scheduling: each a template pattern of
    /// [`Self::templates`] and how many pods it stands for. Empty: Kueue places the kind's pods one by one (or
    /// tiergate does not place them by topology).
    pub pod_sets: &'static [PodSetAt],
}

/// One pod set of a kind: a template pattern of the kind's layout (`*` as there) and its pod count.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PodSetAt {
    /// The template pattern (also one of the layout's), e.g. `/spec/pytorchReplicaSpecs/*/template`.
    pub template: &'static str,
    /// How many pods the set holds in one Kueue workload.
    pub count: PodCount,
}

/// How many pods one pod set holds, as Kueue v0.19.2 counts them (`PodSets()` of each integration). Pointers may
/// hold the template pattern's `*`s, which stand for the same element.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PodCount {
    /// A Job spec at the pointer: `parallelism` (default 1), at most `completions` (Kueue's `podsCount`).
    Job(&'static str),
    /// `replicas` at the first pointer (default 1) times the pods of the Job spec at the second (JobSet).
    ReplicatedJob(&'static str, &'static str),
    /// The integer at the pointer (default 1), times the one at the second pointer when given (default 1): replica
    /// counts, RayCluster `replicas` × `numOfHosts`.
    Replicas(&'static str, Option<&'static str>),
    /// A single pod (a Ray head).
    One,
    /// One LeaderWorkerSet group's members in the worker template: `size` (default 1), less the leader when the
    /// leader template is present. Kueue makes one workload per group, so this pod set is the whole group.
    GroupWorkers {
        /// Pointer to `size`.
        size: &'static str,
        /// Pointer to the leader template.
        leader: &'static str,
    },
}

/// One pod set found in an object: its template and pod count.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodSet {
    /// Where its template is.
    pub template: PodTemplatePointers,
    /// Pods in the set.
    pub count: u64,
    /// A LeaderWorkerSet group: Kueue places it with the slice annotations.
    pub group: bool,
}

/// The kind's `managedBy` field: MultiKueue dispatches an object only when it names
/// [`MULTIKUEUE_CONTROLLER`] there, so the kind's own controller leaves it to Kueue on the management cluster.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ManagedBy {
    /// Pointer to the string field.
    pub pointer: &'static str,
    /// The kind's own controller name, which Kueue's webhook replaces as it replaces an unset field
    /// (`CanDefaultManagedBy` of each v0.19.2 integration); any other value is the user's choice and is kept.
    pub own_controller: &'static str,
}

/// The controller name MultiKueue's objects carry in `managedBy` (`kueue.MultiKueueControllerName`).
pub const MULTIKUEUE_CONTROLLER: &str = "kueue.x-k8s.io/multikueue";

const fn managed_by(pointer: &'static str, own_controller: &'static str) -> Option<ManagedBy> {
    Some(ManagedBy { pointer, own_controller })
}

impl WorkloadAdapter {
    /// This row with its `managedBy` field.
    const fn dispatched_through(self, managed_by: Option<ManagedBy>) -> Self {
        Self { managed_by, ..self }
    }

    /// This row with its pod sets.
    const fn in_pod_sets(self, pod_sets: &'static [PodSetAt]) -> Self {
        Self { pod_sets, ..self }
    }
}

const QUEUE_LABEL_POINTER: &str = "/metadata/labels/kueue.x-k8s.io~1queue-name";
const ON_OBJECT: &str = "/metadata";

/// The annotations Kueue's LeaderWorkerSet webhook puts on the leader and worker templates
/// (`pkg/controller/jobs/leaderworkerset/leaderworkerset_webhook.go`, v0.19.2).
const LWS_TEMPLATE_ANNOTATIONS: &[(&str, &str)] = &[
    ("kueue.x-k8s.io/pod-suspending-parent", "leaderworkerset.x-k8s.io/leaderworkerset"),
    ("kueue.x-k8s.io/pod-group-serving", "true"),
];

const fn suspended_at(suspend: &'static str) -> Queueing {
    Queueing::SuspendedWithQueueLabel { suspend }
}

/// A Kubeflow training-operator kind (`kubeflow.org/v1`): templates in the `*ReplicaSpecs` map, suspended through
/// `spec.runPolicy.suspend`; the replica specs are left alone on UPDATE, as a Job's template.
const fn kubeflow(kind: &'static str, templates: &'static [TemplateAt]) -> WorkloadAdapter {
    WorkloadAdapter {
        group: "kubeflow.org",
        version: "v1",
        kind,
        templates: TemplateLayout::Patterns(templates),
        queueing: suspended_at("/spec/runPolicy/suspend"),
        queue_labels_at: ON_OBJECT,
        resources_outside_templates: &[],
        immutable_on_update: &["/spec/runPolicy/suspend", QUEUE_LABEL_POINTER],
        managed_by: managed_by("/spec/runPolicy/managedBy", "kubeflow.org/training-operator"),
        pod_sets: &[],
    }
}

const fn plain(
    group: &'static str,
    version: &'static str,
    kind: &'static str,
    templates: TemplateLayout,
    queueing: Queueing,
    immutable_on_update: &'static [&'static str],
) -> WorkloadAdapter {
    WorkloadAdapter {
        group,
        version,
        kind,
        templates,
        queueing,
        queue_labels_at: ON_OBJECT,
        resources_outside_templates: &[],
        immutable_on_update,
        managed_by: None,
        pod_sets: &[],
    }
}

/// Every kind tiergate mutates. The versions, suspend fields and template locations are those of Kueue v0.19.2's
/// integrations (`pkg/controller/jobs/*`) and of the CRDs it pins (`../shared/workload-crds/README.md`).
pub static ADAPTERS: &[WorkloadAdapter] = &[
    // The pod template is immutable once created (Kubernetes only lets a suspended, never-started Job change
    // scheduling directives, and that is Kueue's to do); Kueue forbids moving a running Job between queues.
    plain(
        "batch",
        "v1",
        "Job",
        TemplateLayout::Single("/spec/template"),
        suspended_at("/spec/suspend"),
        &["/spec/template", "/spec/suspend", QUEUE_LABEL_POINTER],
    )
    .dispatched_through(managed_by("/spec/managedBy", "kubernetes.io/job-controller"))
    .in_pod_sets(&[PodSetAt { template: "/spec/template", count: PodCount::Job("/spec") }]),
    plain(
        "jobset.x-k8s.io",
        "v1alpha2",
        "JobSet",
        TemplateLayout::PerItem { list: "/spec/replicatedJobs", item: "/template/spec/template" },
        suspended_at("/spec/suspend"),
        &["/spec/replicatedJobs", "/spec/suspend", QUEUE_LABEL_POINTER],
    )
    .dispatched_through(managed_by("/spec/managedBy", "jobset.sigs.k8s.io/jobset-controller"))
    .in_pod_sets(&[PodSetAt {
        template: "/spec/replicatedJobs/*/template/spec/template",
        count: PodCount::ReplicatedJob("/spec/replicatedJobs/*/replicas", "/spec/replicatedJobs/*/template/spec"),
    }]),
    // A Pod's spec is immutable apart from image, activeDeadlineSeconds, added tolerations and removed
    // scheduling gates; tiergate changes none of it after creation.
    plain("", "v1", "Pod", TemplateLayout::Pod, Queueing::NotQueued, &["/spec"]),
    plain("apps", "v1", "Deployment", TemplateLayout::Single("/spec/template"), Queueing::NotQueued, &[]),
    plain("apps", "v1", "StatefulSet", TemplateLayout::Single("/spec/template"), Queueing::NotQueued, &[]),
    // Kueue does not manage CronJobs: it manages the Jobs they spawn, which copy `spec.jobTemplate`. The template
    // gets the decision a Job would get (queue label on the job template's metadata, `suspend: true` in the job
    // template, tier selector), checked at CREATE and UPDATE; `spec.suspend` pauses the schedule and is not ours.
    WorkloadAdapter {
        group: "batch",
        version: "v1",
        kind: "CronJob",
        templates: TemplateLayout::Single("/spec/jobTemplate/spec/template"),
        queueing: suspended_at("/spec/jobTemplate/spec/suspend"),
        queue_labels_at: "/spec/jobTemplate/metadata",
        resources_outside_templates: &[],
        immutable_on_update: &[],
        // The Jobs it spawns carry the queue label from the start, so Kueue's own webhook dispatches them.
        managed_by: None,
        pod_sets: &[PodSetAt {
            template: "/spec/jobTemplate/spec/template",
            count: PodCount::Job("/spec/jobTemplate/spec"),
        }],
    },
    // KubeRay: a RayJob runs once (its cluster spec is left alone on UPDATE, as a Job's template); a RayCluster
    // and a RayService live on and may change their worker groups, which then get the same decision.
    plain(
        "ray.io",
        "v1",
        "RayJob",
        TemplateLayout::Patterns(&[
            TemplateAt::PodTemplate("/spec/rayClusterSpec/headGroupSpec/template"),
            TemplateAt::PodTemplate("/spec/rayClusterSpec/workerGroupSpecs/*/template"),
        ]),
        suspended_at("/spec/suspend"),
        &["/spec/rayClusterSpec", "/spec/suspend", QUEUE_LABEL_POINTER],
    )
    .dispatched_through(managed_by("/spec/managedBy", "ray.io/kuberay-operator"))
    .in_pod_sets(&[
        PodSetAt { template: "/spec/rayClusterSpec/headGroupSpec/template", count: PodCount::One },
        PodSetAt {
            template: "/spec/rayClusterSpec/workerGroupSpecs/*/template",
            count: PodCount::Replicas(
                "/spec/rayClusterSpec/workerGroupSpecs/*/replicas",
                Some("/spec/rayClusterSpec/workerGroupSpecs/*/numOfHosts"),
            ),
        },
    ]),
    plain(
        "ray.io",
        "v1",
        "RayCluster",
        TemplateLayout::Patterns(&[
            TemplateAt::PodTemplate("/spec/headGroupSpec/template"),
            TemplateAt::PodTemplate("/spec/workerGroupSpecs/*/template"),
        ]),
        suspended_at("/spec/suspend"),
        &["/spec/suspend", QUEUE_LABEL_POINTER],
    )
    .dispatched_through(managed_by("/spec/managedBy", "ray.io/kuberay-operator"))
    .in_pod_sets(&[
        PodSetAt { template: "/spec/headGroupSpec/template", count: PodCount::One },
        PodSetAt {
            template: "/spec/workerGroupSpecs/*/template",
            count: PodCount::Replicas("/spec/workerGroupSpecs/*/replicas", Some("/spec/workerGroupSpecs/*/numOfHosts")),
        },
    ]),
    plain(
        "ray.io",
        "v1",
        "RayService",
        TemplateLayout::Patterns(&[
            TemplateAt::PodTemplate("/spec/rayClusterConfig/headGroupSpec/template"),
            TemplateAt::PodTemplate("/spec/rayClusterConfig/workerGroupSpecs/*/template"),
        ]),
        suspended_at("/spec/rayClusterConfig/suspend"),
        &["/spec/rayClusterConfig/suspend", QUEUE_LABEL_POINTER],
    )
    .dispatched_through(managed_by("/spec/managedBy", "ray.io/kuberay-operator"))
    .in_pod_sets(&[
        PodSetAt { template: "/spec/rayClusterConfig/headGroupSpec/template", count: PodCount::One },
        PodSetAt {
            template: "/spec/rayClusterConfig/workerGroupSpecs/*/template",
            count: PodCount::Replicas(
                "/spec/rayClusterConfig/workerGroupSpecs/*/replicas",
                Some("/spec/rayClusterConfig/workerGroupSpecs/*/numOfHosts"),
            ),
        },
    ]),
    kubeflow("PyTorchJob", &[TemplateAt::ReplicaMap("/spec/pytorchReplicaSpecs/*/template")]).in_pod_sets(&[
        PodSetAt {
            template: "/spec/pytorchReplicaSpecs/*/template",
            count: PodCount::Replicas("/spec/pytorchReplicaSpecs/*/replicas", None),
        },
    ]),
    kubeflow("TFJob", &[TemplateAt::ReplicaMap("/spec/tfReplicaSpecs/*/template")]).in_pod_sets(&[PodSetAt {
        template: "/spec/tfReplicaSpecs/*/template",
        count: PodCount::Replicas("/spec/tfReplicaSpecs/*/replicas", None),
    }]),
    kubeflow("XGBoostJob", &[TemplateAt::ReplicaMap("/spec/xgbReplicaSpecs/*/template")]).in_pod_sets(&[PodSetAt {
        template: "/spec/xgbReplicaSpecs/*/template",
        count: PodCount::Replicas("/spec/xgbReplicaSpecs/*/replicas", None),
    }]),
    kubeflow("PaddleJob", &[TemplateAt::ReplicaMap("/spec/paddleReplicaSpecs/*/template")]).in_pod_sets(&[PodSetAt {
        template: "/spec/paddleReplicaSpecs/*/template",
        count: PodCount::Replicas("/spec/paddleReplicaSpecs/*/replicas", None),
    }]),
    kubeflow("JAXJob", &[TemplateAt::ReplicaMap("/spec/jaxReplicaSpecs/*/template")]).in_pod_sets(&[PodSetAt {
        template: "/spec/jaxReplicaSpecs/*/template",
        count: PodCount::Replicas("/spec/jaxReplicaSpecs/*/replicas", None),
    }]),
    WorkloadAdapter {
        version: "v2beta1",
        kind: "MPIJob",
        managed_by: managed_by("/spec/runPolicy/managedBy", "kubeflow.org/mpi-operator"),
        pod_sets: &[PodSetAt {
            template: "/spec/mpiReplicaSpecs/*/template",
            count: PodCount::Replicas("/spec/mpiReplicaSpecs/*/replicas", None),
        }],
        ..kubeflow("MPIJob", &[TemplateAt::ReplicaMap("/spec/mpiReplicaSpecs/*/template")])
    },
    // Kubeflow Trainer v2: the pod template lives in the referenced (Cluster)TrainingRuntime, which tiergate does
    // not read; the TrainJob sizes its nodes with `spec.trainer.resourcesPerNode`. The only pod templates on the
    // object are runtime patches (a user's own are checked like any template); the tier's GPU class reaches the
    // pods through Kueue, which writes the admitted flavor's node labels and tolerations into its own runtime
    // patch (the tier's ClusterQueue holds only the tier's flavors).
    WorkloadAdapter {
        group: "trainer.kubeflow.org",
        version: "v1alpha1",
        kind: "TrainJob",
        templates: TemplateLayout::Patterns(&[TemplateAt::PodTemplate(
            "/spec/runtimePatches/*/trainingRuntimeSpec/template/spec/replicatedJobs/*/template/spec/template",
        )]),
        queueing: suspended_at("/spec/suspend"),
        queue_labels_at: ON_OBJECT,
        resources_outside_templates: &["/spec/trainer/resourcesPerNode"],
        immutable_on_update: &["/spec/suspend", QUEUE_LABEL_POINTER],
        managed_by: managed_by("/spec/managedBy", "trainer.kubeflow.org/trainjob-controller"),
        // Its pod sets are the runtime's replicated jobs, which tiergate does not read.
        pod_sets: &[],
    },
    // Multi-host inference: Kueue gates the pods of each group (no suspend field); leader and worker templates.
    plain(
        "leaderworkerset.x-k8s.io",
        "v1",
        "LeaderWorkerSet",
        TemplateLayout::Patterns(&[
            TemplateAt::PodTemplate("/spec/leaderWorkerTemplate/leaderTemplate"),
            TemplateAt::PodTemplate("/spec/leaderWorkerTemplate/workerTemplate"),
        ]),
        Queueing::PodGroupWithQueueLabel { template_annotations: LWS_TEMPLATE_ANNOTATIONS },
        &[QUEUE_LABEL_POINTER],
    )
    .in_pod_sets(&[
        PodSetAt { template: "/spec/leaderWorkerTemplate/leaderTemplate", count: PodCount::One },
        PodSetAt {
            template: "/spec/leaderWorkerTemplate/workerTemplate",
            count: PodCount::GroupWorkers {
                size: "/spec/leaderWorkerTemplate/size",
                leader: "/spec/leaderWorkerTemplate/leaderTemplate",
            },
        },
    ]),
    // The AppWrapper webhook refuses changes to `spec.components` after creation.
    plain(
        "workload.codeflare.dev",
        "v1beta2",
        "AppWrapper",
        TemplateLayout::Embedded { list: "/spec/components", item: "/template" },
        suspended_at("/spec/suspend"),
        &["/spec/components", "/spec/suspend", QUEUE_LABEL_POINTER],
    )
    .dispatched_through(managed_by("/spec/managedBy", "workload.codeflare.dev/appwrapper-controller")),
    // Alpha in Kueue (feature gate SparkApplicationIntegration): driver and executor are SparkPodSpecs (pod fields
    // flat, GPUs as `gpu: {name, quantity}`), each with an optional full pod `template`.
    plain(
        "sparkoperator.k8s.io",
        "v1beta2",
        "SparkApplication",
        TemplateLayout::Patterns(&[
            TemplateAt::Flat("/spec/driver"),
            TemplateAt::Flat("/spec/executor"),
            TemplateAt::PodTemplate("/spec/driver/template"),
            TemplateAt::PodTemplate("/spec/executor/template"),
        ]),
        suspended_at("/spec/suspend"),
        &["/spec/suspend", QUEUE_LABEL_POINTER],
    ),
];

/// A kind whose pod template tiergate reads but never mutates (no row in [`ADAPTERS`]): placement validates the
/// strategies on it at its admission. A ReplicaSet's template belongs to its Deployment (the Deployment controller
/// would see a foreign template and roll out again).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TemplateOwner {
    /// API group.
    pub group: &'static str,
    /// Kind.
    pub kind: &'static str,
    /// Where the pod templates are.
    pub templates: TemplateLayout,
}

/// Kinds with pod templates that tiergate only reads.
pub static READ_ONLY_TEMPLATE_OWNERS: &[TemplateOwner] =
    &[TemplateOwner { group: "apps", kind: "ReplicaSet", templates: TemplateLayout::Single("/spec/template") }];

/// The adapter for a group/version/kind, if tiergate handles it.
pub fn adapter_for(group: &str, version: &str, kind: &str) -> Option<&'static WorkloadAdapter> {
    ADAPTERS.iter().find(|adapter| adapter.group == group && adapter.version == version && adapter.kind == kind)
}

/// Where a kind keeps its pod templates, for every kind tiergate knows: the rows of [`ADAPTERS`] (any version)
/// and [`READ_ONLY_TEMPLATE_OWNERS`].
pub fn template_layout(group: &str, kind: &str) -> Option<TemplateLayout> {
    let adapter = ADAPTERS.iter().find(|adapter| adapter.group == group && adapter.kind == kind);
    adapter.map(|adapter| adapter.templates).or_else(|| {
        READ_ONLY_TEMPLATE_OWNERS
            .iter()
            .find(|owner| owner.group == group && owner.kind == kind)
            .map(|owner| owner.templates)
    })
}

/// The group and kind of an embedded object (`apiVersion`, `kind`).
fn group_kind(object: &Value) -> (String, String) {
    let api_version = object.get("apiVersion").and_then(Value::as_str).unwrap_or_default();
    let group = api_version.split_once('/').map_or("", |(group, _)| group);
    (group.to_owned(), object.get("kind").and_then(Value::as_str).unwrap_or_default().to_owned())
}

/// The embedded objects of `object` whose kind tiergate does not know and whose pods (any object with a
/// `containers` array inside them) request one of `resources`, as `group/kind` (`kind` for the core group).
pub fn unknown_embedded_kinds(layout: TemplateLayout, object: &Value, resources: &[&str]) -> Vec<String> {
    let TemplateLayout::Embedded { list, item } = layout else {
        return Vec::new();
    };
    let count = object.pointer(list).and_then(Value::as_array).map_or(0, Vec::len);
    (0..count)
        .filter_map(|index| object.pointer(&format!("{list}/{index}{item}")))
        .filter(|embedded| {
            let (group, kind) = group_kind(embedded);
            template_layout(&group, &kind).is_none()
        })
        .filter(|embedded| {
            let mut specs = Vec::new();
            containers_holders(embedded, String::new(), 0, &mut specs);
            specs.iter().filter_map(|spec| embedded.pointer(spec)).any(|spec| requests_any(spec, resources))
        })
        .map(|embedded| match group_kind(embedded) {
            (group, kind) if group.is_empty() => kind,
            (group, kind) => format!("{group}/{kind}"),
        })
        .collect()
}

/// Deepest nesting searched in an embedded object of an unknown kind.
const MAX_SEARCH_DEPTH: usize = 24;

/// Pointers (below `at`) of every object holding a `containers` array, outermost first.
fn containers_holders(value: &Value, at: String, depth: usize, found: &mut Vec<String>) {
    if depth > MAX_SEARCH_DEPTH {
        return;
    }
    match value {
        Value::Object(map) => {
            if map.get("containers").is_some_and(Value::is_array) {
                found.push(at.clone());
            }
            for (key, child) in map {
                containers_holders(child, format!("{at}/{}", escape(key)), depth + 1, found);
            }
        }
        Value::Array(items) => {
            for (index, child) in items.iter().enumerate() {
                containers_holders(child, format!("{at}/{index}"), depth + 1, found);
            }
        }
        _ => {}
    }
}

/// `key` as one JSON-pointer token.
fn escape(key: &str) -> String {
    key.replace('~', "~0").replace('/', "~1")
}

/// Every concrete pointer matching `pattern` in `object` (`*` = every array element or map value), in document
/// order.
fn expand(object: &Value, pattern: &str) -> Vec<String> {
    let mut found = vec![String::new()];
    for token in pattern.split('/').skip(1) {
        found = found
            .into_iter()
            .flat_map(|prefix| {
                if token != "*" {
                    return vec![format!("{prefix}/{token}")];
                }
                match object.pointer(&prefix) {
                    Some(Value::Array(items)) => (0..items.len()).map(|index| format!("{prefix}/{index}")).collect(),
                    Some(Value::Object(map)) => map.keys().map(|key| format!("{prefix}/{}", escape(key))).collect(),
                    _ => Vec::new(),
                }
            })
            .collect();
    }
    found.into_iter().filter(|pointer| object.pointer(pointer).is_some_and(Value::is_object)).collect()
}

/// The kind (`group/kind`, `kind` for the core group) of the controller of `pod` (a Pod as JSON) when neither
/// tiergate nor Kueue knows that kind; `None` for a pod without a controller or with a known one.
pub fn unknown_owner_kind(pod: &Value) -> Option<String> {
    let owners = pod.pointer("/metadata/ownerReferences").and_then(Value::as_array)?;
    let controller = owners.iter().find(|owner| owner.get("controller").and_then(Value::as_bool) == Some(true))?;
    let (group, kind) = group_kind(controller);
    let known =
        template_layout(&group, &kind).is_some() || NOT_WORKLOAD_OWNERS.contains(&(group.as_str(), kind.as_str()));
    match (known, group.is_empty()) {
        (true, _) => None,
        (false, true) => Some(kind),
        (false, false) => Some(format!("{group}/{kind}")),
    }
}

/// The controlling owner reference of an object (`controller: true`), if any.
pub fn controller_of(meta: &ObjectMeta) -> Option<&OwnerReference> {
    meta.owner_references.as_deref().unwrap_or_default().iter().find(|owner| owner.controller == Some(true))
}

impl TemplateLayout {
    /// The pod templates present in `object`, in document order.
    /// The pod specs this layout holds at pointers without a `*` (a Pod's own spec, a Job's template, the leader
    /// and worker templates of a LeaderWorkerSet, a SparkApplication's driver and executor), in layout order:
    /// the templates an edit can name by a fixed JSON pointer (the in-server gate's MutatingAdmissionPolicies
    /// edit these, and the webhook reads their marks back).
    pub fn fixed_spec_pointers(self) -> Vec<String> {
        let fixed = |pointer: &str| !pointer.contains('*');
        match self {
            TemplateLayout::Pod => vec!["/spec".to_owned()],
            TemplateLayout::Single(template) => vec![format!("{template}/spec")],
            TemplateLayout::Patterns(patterns) => patterns
                .iter()
                .filter_map(|pattern| match pattern {
                    TemplateAt::PodTemplate(template) if fixed(template) => Some(format!("{template}/spec")),
                    TemplateAt::Flat(at) if fixed(at) => Some((*at).to_owned()),
                    _ => None,
                })
                .collect(),
            TemplateLayout::PerItem { .. } | TemplateLayout::Embedded { .. } => Vec::new(),
        }
    }

    pub fn pod_templates(self, object: &Value) -> Vec<PodTemplatePointers> {
        match self {
            TemplateLayout::Pod => {
                vec![PodTemplatePointers { metadata: "/metadata".to_owned(), spec: "/spec".to_owned() }]
            }
            TemplateLayout::Single(template) => match object.pointer(template) {
                Some(Value::Object(_)) => vec![template_pointers(template)],
                _ => Vec::new(),
            },
            TemplateLayout::PerItem { list, item } => {
                let count = object.pointer(list).and_then(Value::as_array).map_or(0, Vec::len);
                (0..count)
                    .map(|index| format!("{list}/{index}{item}"))
                    .filter(|template| object.pointer(template).is_some_and(Value::is_object))
                    .map(|template| template_pointers(&template))
                    .collect()
            }
            TemplateLayout::Patterns(patterns) => patterns
                .iter()
                .flat_map(|pattern| match pattern {
                    TemplateAt::PodTemplate(pattern) | TemplateAt::ReplicaMap(pattern) => {
                        expand(object, pattern).iter().map(|template| template_pointers(template)).collect::<Vec<_>>()
                    }
                    TemplateAt::Flat(pattern) => expand(object, pattern)
                        .into_iter()
                        .map(|at| PodTemplatePointers { metadata: at.clone(), spec: at })
                        .collect(),
                })
                .collect(),
            TemplateLayout::Embedded { list, item } => {
                let count = object.pointer(list).and_then(Value::as_array).map_or(0, Vec::len);
                (0..count)
                    .map(|index| format!("{list}/{index}{item}"))
                    .filter_map(|at| object.pointer(&at).filter(|embedded| embedded.is_object()).map(|e| (at, e)))
                    .flat_map(|(at, embedded)| embedded_templates(&at, embedded))
                    .collect()
            }
        }
    }

    /// The pod specs present in `object`, in document order.
    pub fn pod_specs(self, object: &Value) -> Vec<&Value> {
        self.pod_templates(object).iter().filter_map(|template| object.pointer(&template.spec)).collect()
    }

    /// Whether any pod spec of `object` requests or limits one of `resources` (see [`requests_any`]).
    pub fn requests_any(self, object: &Value, resources: &[&str]) -> bool {
        self.pod_specs(object).into_iter().any(|spec| requests_any(spec, resources))
    }
}

impl WorkloadAdapter {
    /// The pod templates present in `object`, in document order.
    pub fn pod_templates(&self, object: &Value) -> Vec<PodTemplatePointers> {
        self.templates.pod_templates(object)
    }

    /// The resource (lower-case plural) of the kind, as API paths and admission rules name it: every kind in the
    /// table is pluralised by appending `s` to its lower-cased name (checked against the CRDs by the tests).
    pub fn plural(&self) -> String {
        format!("{}s", self.kind.to_ascii_lowercase())
    }

    /// The pod sets present in `object` ([`Self::pod_sets`] matched to its templates), in pod-set order.
    pub fn pod_sets(&self, object: &Value) -> Vec<PodSet> {
        let templates = self.pod_templates(object);
        self.pod_sets
            .iter()
            .flat_map(|at| {
                templates.iter().filter_map(move |template| {
                    let concrete = template.metadata.strip_suffix("/metadata")?;
                    let stars = pattern_captures(at.template, concrete)?;
                    Some(PodSet {
                        template: template.clone(),
                        count: at.count.count(object, &stars),
                        group: matches!(at.count, PodCount::GroupWorkers { .. }),
                    })
                })
            })
            .collect()
    }

    /// Whether tiergate queues this kind in Kueue itself (queue label, and `suspend` or pod groups): the kinds
    /// Kueue manages as one workload, whose children are left to them.
    pub fn is_queued(&self) -> bool {
        !matches!(self.queueing, Queueing::NotQueued)
    }

    /// The metadata whose `kueue.x-k8s.io/priority-class` label is held to a tier's ceiling: the object's own, and
    /// for a kind whose children are created with `queue_labels_at`'s labels (a CronJob's job template) those too.
    pub fn priority_labels_at(&self) -> impl Iterator<Item = &'static str> {
        std::iter::once("/metadata").chain(Some(self.queue_labels_at).filter(|at| *at != "/metadata"))
    }

    /// The metadata whose `kueue.x-k8s.io/max-exec-time-seconds` label Kueue reads as the kind's workloads' run-time
    /// limit: for a kind Kueue suspends, the queue labels' metadata (a CronJob's job template, which its Jobs copy);
    /// for a kind whose pods Kueue queues as groups, the object's and each pod template's at a fixed pointer (Kueue
    /// reads the pods' own labels, and the pods copy their template's); none for a kind tiergate does not queue (a
    /// Pod queued by its own queue label carries it on its own metadata).
    pub fn run_time_labels_at(&self) -> Vec<String> {
        match self.queueing {
            Queueing::NotQueued => Vec::new(),
            Queueing::SuspendedWithQueueLabel { .. } => vec![self.queue_labels_at.to_owned()],
            Queueing::PodGroupWithQueueLabel { .. } => std::iter::once(self.queue_labels_at.to_owned())
                .chain(
                    self.templates
                        .fixed_spec_pointers()
                        .into_iter()
                        .filter_map(|spec| spec.strip_suffix("/spec").map(|template| format!("{template}/metadata"))),
                )
                .collect(),
        }
    }

    /// The pointer to the kind's boolean `suspend` field, if Kueue gates the kind with one.
    pub fn suspend_pointer(&self) -> Option<&'static str> {
        match self.queueing {
            Queueing::SuspendedWithQueueLabel { suspend } => Some(suspend),
            Queueing::PodGroupWithQueueLabel { .. } | Queueing::NotQueued => None,
        }
    }

    /// Whether `object` is suspended (false for kinds without `suspend`).
    pub fn is_suspended(&self, object: &Value) -> bool {
        self.suspend_pointer().and_then(|suspend| object.pointer(suspend)).and_then(Value::as_bool).unwrap_or(false)
    }

    /// Whether a `ResourceRequirements` outside the pod templates ([`Self::resources_outside_templates`]) requests
    /// or limits one of `resources` with a non-zero quantity.
    pub fn requests_outside_templates(&self, object: &Value, resources: &[&str]) -> bool {
        self.resources_outside_templates
            .iter()
            .filter_map(|pointer| object.pointer(pointer))
            .any(|requirements| requirements_request_any(requirements, resources))
    }
}

/// The templates of one embedded object at `at`: through its kind's layout when tiergate knows the kind, else
/// every object with a `containers` array (its sibling `metadata` as the template's metadata).
fn embedded_templates(at: &str, embedded: &Value) -> Vec<PodTemplatePointers> {
    let (group, kind) = group_kind(embedded);
    let prefixed = |template: PodTemplatePointers| PodTemplatePointers {
        metadata: format!("{at}{}", template.metadata),
        spec: format!("{at}{}", template.spec),
    };
    if let Some(layout) = template_layout(&group, &kind) {
        return layout.pod_templates(embedded).into_iter().map(prefixed).collect();
    }
    let mut holders = Vec::new();
    containers_holders(embedded, String::new(), 0, &mut holders);
    holders
        .into_iter()
        .map(|spec| {
            let parent = spec.rsplit_once('/').map_or("", |(parent, _)| parent);
            prefixed(PodTemplatePointers { metadata: format!("{parent}/metadata"), spec })
        })
        .collect()
}

impl PodCount {
    /// The pods of this set in `object`, the pattern's `*`s standing for `stars`.
    fn count(self, object: &Value, stars: &[&str]) -> u64 {
        let integer = |pattern: &str, default: u64| {
            object.pointer(&fill_pattern(pattern, stars)).and_then(Value::as_u64).unwrap_or(default)
        };
        let job = |spec: &str| {
            let parallelism = integer(&format!("{spec}/parallelism"), 1);
            let completions = integer(&format!("{spec}/completions"), parallelism);
            parallelism.min(completions)
        };
        match self {
            Self::Job(spec) => job(spec),
            Self::ReplicatedJob(replicas, spec) => integer(replicas, 1).saturating_mul(job(spec)),
            Self::Replicas(first, second) => integer(first, 1).saturating_mul(second.map_or(1, |at| integer(at, 1))),
            Self::One => 1,
            Self::GroupWorkers { size, leader } => {
                let size = integer(size, 1);
                match object.pointer(leader).is_some_and(Value::is_object) {
                    true => size.saturating_sub(1),
                    false => size,
                }
            }
        }
    }
}

/// The tokens of `concrete` that the `*`s of `pattern` stand for, or `None` when it does not match.
fn pattern_captures<'c>(pattern: &str, concrete: &'c str) -> Option<Vec<&'c str>> {
    let (pattern, concrete): (Vec<&str>, Vec<&str>) = (pattern.split('/').collect(), concrete.split('/').collect());
    if pattern.len() != concrete.len() {
        return None;
    }
    let mut stars = Vec::new();
    for (expected, found) in pattern.iter().zip(concrete) {
        match *expected {
            "*" => stars.push(found),
            _ if *expected == found => {}
            _ => return None,
        }
    }
    Some(stars)
}

/// `pattern` with its `*`s replaced by `stars`, in order.
fn fill_pattern(pattern: &str, stars: &[&str]) -> String {
    let mut stars = stars.iter();
    pattern
        .split('/')
        .map(|token| match token {
            "*" => stars.next().copied().unwrap_or(token),
            _ => token,
        })
        .collect::<Vec<_>>()
        .join("/")
}

fn template_pointers(template: &str) -> PodTemplatePointers {
    PodTemplatePointers { metadata: format!("{template}/metadata"), spec: format!("{template}/spec") }
}

/// Whether any container or init container of `pod_spec` requests or limits one of `resources` with a non-zero
/// quantity; for a flat SparkPodSpec also its `sidecars` and its `gpu: {name, quantity}`.
pub fn requests_any(pod_spec: &Value, resources: &[&str]) -> bool {
    let containers = ["containers", "initContainers", "sidecars"]
        .iter()
        .filter_map(|field| pod_spec.get(field).and_then(Value::as_array))
        .flatten()
        .filter_map(|container| container.get("resources"))
        .any(|requirements| requirements_request_any(requirements, resources));
    let spark_gpu = pod_spec.get("gpu").is_some_and(|gpu| {
        gpu.get("name").and_then(Value::as_str).is_some_and(|name| resources.contains(&name))
            && gpu.get("quantity").is_some_and(|quantity| !is_zero_quantity(quantity))
    });
    containers || spark_gpu
}

/// Whether a `ResourceRequirements` (`requests`, `limits`) names one of `resources` with a non-zero quantity.
fn requirements_request_any(requirements: &Value, resources: &[&str]) -> bool {
    ["requests", "limits"]
        .iter()
        .filter_map(|kind| requirements.get(kind))
        .filter_map(Value::as_object)
        .flatten()
        .any(|(name, quantity)| resources.contains(&name.as_str()) && !is_zero_quantity(quantity))
}

/// A quantity whose number is zero (`0`, `00`, `0.0`, `0m`); also anything that is not a quantity, which the API
/// server would have rejected.
fn is_zero_quantity(quantity: &Value) -> bool {
    match quantity {
        Value::String(text) => {
            let number = text.trim().trim_start_matches('+');
            let digits: Vec<char> = number.chars().take_while(|c| c.is_ascii_digit() || *c == '.').collect();
            digits.iter().all(|c| matches!(c, '0' | '.'))
        }
        Value::Number(number) => number.as_f64() == Some(0.0),
        _ => true,
    }
}

/// Splits an RFC 6901 pointer into unescaped tokens.
pub fn pointer_tokens(pointer: &str) -> Vec<String> {
    pointer.split('/').skip(1).map(|token| token.replace("~1", "/").replace("~0", "~")).collect()
}

/// Sets (`Some`) or removes (`None`) the value at `pointer`, creating intermediate objects when setting.
/// Returns false when a non-object sits on the path (nothing is changed then).
pub fn set_pointer(root: &mut Value, pointer: &str, value: Option<Value>) -> bool {
    let tokens = pointer_tokens(pointer);
    let Some((last, parents)) = tokens.split_last() else {
        if let Some(value) = value {
            *root = value;
        }
        return true;
    };
    let mut current = root;
    for token in parents {
        current = match current {
            Value::Object(map) => {
                if value.is_none() && !map.contains_key(token) {
                    return true;
                }
                map.entry(token.clone()).or_insert_with(|| Value::Object(serde_json::Map::new()))
            }
            Value::Array(items) => match token.parse::<usize>().ok().and_then(|index| items.get_mut(index)) {
                Some(item) => item,
                None => return value.is_none(),
            },
            Value::Null if value.is_some() => {
                *current = Value::Object(serde_json::Map::new());
                match current {
                    Value::Object(map) => map.entry(token.clone()).or_insert_with(|| Value::Null),
                    _ => return false,
                }
            }
            _ => return value.is_none(),
        };
    }
    match (current, value) {
        (Value::Object(map), Some(value)) => {
            map.insert(last.clone(), value);
            true
        }
        (Value::Object(map), None) => {
            map.remove(last);
            true
        }
        (current @ Value::Null, Some(value)) => {
            let mut map = serde_json::Map::new();
            map.insert(last.clone(), value);
            *current = Value::Object(map);
            true
        }
        (_, None) => true,
        (_, Some(_)) => false,
    }
}

/// Copies the value at each pointer from `original` into `mutated` (removing it when `original` lacks it), so a
/// mutation leaves those fields exactly as they were.
pub fn restore_pointers(original: &Value, mutated: &mut Value, pointers: &[&str]) -> bool {
    pointers.iter().all(|pointer| set_pointer(mutated, pointer, original.pointer(pointer).cloned()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn job(limits: Value) -> Value {
        json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j"},
            "spec": {"template": {"spec": {"containers": [{"name": "c", "resources": {"limits": limits}}]}}}})
    }

    #[test]
    fn every_adapter_is_found_by_its_group_version_kind() {
        for adapter in ADAPTERS {
            assert_eq!(adapter_for(adapter.group, adapter.version, adapter.kind), Some(adapter));
        }
        assert_eq!(adapter_for("batch", "v1", "CronTab"), None);
    }

    #[test]
    fn job_template_pointers_reach_its_pod_spec() {
        let adapter = adapter_for("batch", "v1", "Job").unwrap();
        let object = job(json!({"nvidia.com/gpu": "1"}));
        let templates = adapter.pod_templates(&object);
        assert_eq!(templates.len(), 1);
        assert!(object.pointer(&templates[0].spec).unwrap().get("containers").is_some());
        assert_eq!(templates[0].metadata, "/spec/template/metadata");
    }

    #[test]
    fn jobset_has_one_template_per_replicated_job() {
        let adapter = adapter_for("jobset.x-k8s.io", "v1alpha2", "JobSet").unwrap();
        let object = json!({"spec": {"replicatedJobs": [
            {"name": "a", "template": {"spec": {"template": {"spec": {"containers": []}}}}},
            {"name": "b", "template": {"spec": {"template": {"spec": {"containers": []}}}}}
        ]}});
        let specs: Vec<String> = adapter.pod_templates(&object).into_iter().map(|t| t.spec).collect();
        assert_eq!(
            specs,
            [
                "/spec/replicatedJobs/0/template/spec/template/spec",
                "/spec/replicatedJobs/1/template/spec/template/spec"
            ]
        );
    }

    #[test]
    fn gpu_limits_and_init_container_requests_count_but_zero_does_not() {
        let adapter = adapter_for("batch", "v1", "Job").unwrap();
        let gpu = &["nvidia.com/gpu"];
        let with_limit = job(json!({"nvidia.com/gpu": "1"}));
        let spec = with_limit.pointer(&adapter.pod_templates(&with_limit)[0].spec).unwrap();
        assert!(requests_any(spec, gpu));
        assert!(!requests_any(job(json!({"nvidia.com/gpu": "0"})).pointer("/spec/template/spec").unwrap(), gpu));
        let init = json!({"containers": [{"name": "c"}],
            "initContainers": [{"name": "i", "resources": {"requests": {"nvidia.com/gpu": 2}}}]});
        assert!(requests_any(&init, gpu));
        assert!(!requests_any(&init, &["amd.com/gpu"]));
    }

    #[test]
    fn zero_in_any_spelling_is_no_request_and_a_fraction_is_one() {
        let spec = |quantity: &str| json!({"containers": [{"resources": {"limits": {"nvidia.com/gpu": quantity}}}]});
        for zero in ["0", "00", "0.0", "0m", "+0", " 0 "] {
            assert!(!requests_any(&spec(zero), &["nvidia.com/gpu"]), "{zero}");
        }
        for some in ["1", "500m", "0.5", "10"] {
            assert!(requests_any(&spec(some), &["nvidia.com/gpu"]), "{some}");
        }
    }

    #[test]
    fn every_adapter_names_its_resource_as_the_api_server_does() {
        let plurals: Vec<String> = ADAPTERS.iter().map(WorkloadAdapter::plural).collect();
        assert_eq!(
            plurals,
            [
                "jobs",
                "jobsets",
                "pods",
                "deployments",
                "statefulsets",
                "cronjobs",
                "rayjobs",
                "rayclusters",
                "rayservices",
                "pytorchjobs",
                "tfjobs",
                "xgboostjobs",
                "paddlejobs",
                "jaxjobs",
                "mpijobs",
                "trainjobs",
                "leaderworkersets",
                "appwrappers",
                "sparkapplications"
            ]
        );
    }

    #[test]
    fn template_layout_knows_the_adapters_and_the_read_only_owners() {
        assert_eq!(template_layout("batch", "Job"), Some(TemplateLayout::Single("/spec/template")));
        assert_eq!(template_layout("apps", "ReplicaSet"), Some(TemplateLayout::Single("/spec/template")));
        let cron = json!({"spec": {"jobTemplate": {"spec": {"template": {"spec": {"containers": [
            {"name": "c", "resources": {"requests": {"nvidia.com/gpu": "1"}}}]}}}}}});
        let layout = template_layout("batch", "CronJob").unwrap();
        assert_eq!(layout.pod_specs(&cron).len(), 1);
        assert!(layout.requests_any(&cron, &["nvidia.com/gpu"]));
        assert_eq!(template_layout("apps", "DaemonSet"), None);
        assert_eq!(template_layout("", "Job"), None);
    }

    #[test]
    fn controller_of_finds_only_the_controlling_owner() {
        let owner = |name: &str, controller: Option<bool>| OwnerReference {
            name: name.to_owned(),
            controller,
            ..OwnerReference::default()
        };
        let meta = ObjectMeta {
            owner_references: Some(vec![owner("a", None), owner("b", Some(false)), owner("c", Some(true))]),
            ..ObjectMeta::default()
        };
        assert_eq!(controller_of(&meta).map(|owner| owner.name.as_str()), Some("c"));
        assert_eq!(controller_of(&ObjectMeta::default()), None);
    }

    #[test]
    fn set_pointer_escapes_label_keys_and_creates_parents() {
        let mut object = json!({"metadata": {}});
        assert!(set_pointer(&mut object, "/metadata/labels/kueue.x-k8s.io~1queue-name", Some(json!("q"))));
        assert_eq!(object, json!({"metadata": {"labels": {"kueue.x-k8s.io/queue-name": "q"}}}));
        assert!(set_pointer(&mut object, "/metadata/labels/kueue.x-k8s.io~1queue-name", None));
        assert_eq!(object, json!({"metadata": {"labels": {}}}));
    }

    #[test]
    fn restore_pointers_undoes_changes_to_immutable_fields_only() {
        let original = job(json!({"nvidia.com/gpu": "1"}));
        let mut mutated = original.clone();
        set_pointer(&mut mutated, "/spec/template/spec/nodeSelector", Some(json!({"a": "b"})));
        set_pointer(&mut mutated, "/spec/suspend", Some(json!(true)));
        set_pointer(&mut mutated, "/metadata/annotations", Some(json!({"x": "y"})));
        let adapter = adapter_for("batch", "v1", "Job").unwrap();
        assert!(restore_pointers(&original, &mut mutated, adapter.immutable_on_update));
        assert_eq!(mutated.pointer("/spec/template"), original.pointer("/spec/template"));
        assert_eq!(mutated.pointer("/spec/suspend"), None);
        assert_eq!(mutated.pointer("/metadata/annotations/x"), Some(&json!("y")));
    }

    #[test]
    fn suspended_is_read_from_the_kinds_suspend_field() {
        let adapter = adapter_for("batch", "v1", "Job").unwrap();
        assert!(adapter.is_suspended(&json!({"spec": {"suspend": true}})));
        assert!(!adapter.is_suspended(&json!({"spec": {}})));
        assert!(!adapter_for("", "v1", "Pod").unwrap().is_suspended(&json!({"spec": {"suspend": true}})));
    }
    #[test]
    fn kubeflow_templates_are_every_value_of_the_replica_spec_map() {
        let adapter = adapter_for("kubeflow.org", "v1", "PyTorchJob").unwrap();
        let object = json!({"spec": {"pytorchReplicaSpecs": {
            "Master": {"template": {"spec": {"containers": []}}},
            "Worker": {"template": {"spec": {"containers": []}}}}}});
        let specs: Vec<String> = adapter.pod_templates(&object).into_iter().map(|t| t.spec).collect();
        assert_eq!(
            specs,
            ["/spec/pytorchReplicaSpecs/Master/template/spec", "/spec/pytorchReplicaSpecs/Worker/template/spec"]
        );
        assert!(adapter.is_queued());
        assert!(adapter.is_suspended(&json!({"spec": {"runPolicy": {"suspend": true}}})));
        assert!(!adapter.is_suspended(&json!({"spec": {"suspend": true}})));
    }

    #[test]
    fn ray_head_and_every_worker_group_are_templates_and_missing_groups_are_skipped() {
        let adapter = adapter_for("ray.io", "v1", "RayJob").unwrap();
        let object = json!({"spec": {"rayClusterSpec": {"headGroupSpec": {"template": {"spec": {}}},
            "workerGroupSpecs": [{"template": {"spec": {}}}, {"groupName": "no-template"}, {"template": {"spec": {}}}]}}});
        let specs: Vec<String> = adapter.pod_templates(&object).into_iter().map(|t| t.spec).collect();
        assert_eq!(
            specs,
            [
                "/spec/rayClusterSpec/headGroupSpec/template/spec",
                "/spec/rayClusterSpec/workerGroupSpecs/0/template/spec",
                "/spec/rayClusterSpec/workerGroupSpecs/2/template/spec"
            ]
        );
    }

    #[test]
    fn an_appwrapper_finds_a_wrapped_job_through_the_job_layout_and_an_unknown_kind_by_its_containers() {
        let adapter = adapter_for("workload.codeflare.dev", "v1beta2", "AppWrapper").unwrap();
        let gpu = json!([{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]);
        let object = json!({"spec": {"components": [
            {"template": {"apiVersion": "batch/v1", "kind": "Job", "spec": {"template": {"spec": {"containers": gpu}}}}},
            {"template": {"apiVersion": "example.com/v1", "kind": "Trainer", "spec": {"pods": [
                {"metadata": {}, "spec": {"containers": gpu}}]}}},
            {"template": {"apiVersion": "example.com/v1", "kind": "Idle", "spec": {"pod": {"spec": {"containers": []}}}}}
        ]}});
        let templates = adapter.pod_templates(&object);
        assert_eq!(templates[0].spec, "/spec/components/0/template/spec/template/spec");
        assert_eq!(templates[1].spec, "/spec/components/1/template/spec/pods/0/spec");
        assert_eq!(templates[1].metadata, "/spec/components/1/template/spec/pods/0/metadata");
        assert_eq!(templates.len(), 3);
        assert_eq!(unknown_embedded_kinds(adapter.templates, &object, &["nvidia.com/gpu"]), ["example.com/Trainer"]);
        assert!(
            unknown_embedded_kinds(TemplateLayout::Single("/spec/template"), &object, &["nvidia.com/gpu"]).is_empty()
        );
    }

    #[test]
    fn a_pod_owned_by_a_kind_nobody_manages_is_reported_and_known_owners_are_not() {
        let pod = |api_version: &str, kind: &str, controller: bool| {
            json!({"metadata": {"ownerReferences": [{"apiVersion": api_version, "kind": kind, "name": "o",
                "uid": "u", "controller": controller}]}})
        };
        assert_eq!(
            unknown_owner_kind(&pod("argoproj.io/v1alpha1", "Workflow", true)).as_deref(),
            Some("argoproj.io/Workflow")
        );
        assert_eq!(unknown_owner_kind(&pod("apps/v1", "DaemonSet", true)).as_deref(), Some("apps/DaemonSet"));
        assert_eq!(unknown_owner_kind(&pod("argoproj.io/v1alpha1", "Workflow", false)), None);
        assert_eq!(unknown_owner_kind(&pod("ray.io/v1", "RayCluster", true)), None);
        assert_eq!(unknown_owner_kind(&pod("apps/v1", "ReplicaSet", true)), None);
        assert_eq!(unknown_owner_kind(&pod("v1", "Node", true)), None);
        assert_eq!(unknown_owner_kind(&json!({"metadata": {}})), None);
    }

    #[test]
    fn spark_gpus_and_trainjob_resources_per_node_count_as_gpu_requests() {
        let gpu = &["nvidia.com/gpu"];
        assert!(requests_any(&json!({"gpu": {"name": "nvidia.com/gpu", "quantity": 1}}), gpu));
        assert!(!requests_any(&json!({"gpu": {"name": "nvidia.com/gpu", "quantity": 0}}), gpu));
        assert!(!requests_any(&json!({"gpu": {"name": "amd.com/gpu", "quantity": 1}}), gpu));
        let trainjob = adapter_for("trainer.kubeflow.org", "v1alpha1", "TrainJob").unwrap();
        let sized = |quantity: &str| json!({"spec": {"trainer": {"resourcesPerNode": {"limits": {"nvidia.com/gpu": quantity}}}}});
        assert!(trainjob.requests_outside_templates(&sized("2"), gpu));
        assert!(!trainjob.requests_outside_templates(&sized("0"), gpu));
        assert!(!adapter_for("batch", "v1", "Job").unwrap().requests_outside_templates(&sized("2"), gpu));
    }

    #[test]
    fn a_cronjob_queues_its_job_template_and_a_leaderworkerset_its_pod_groups() {
        let cron = adapter_for("batch", "v1", "CronJob").unwrap();
        assert_eq!(cron.queue_labels_at, "/spec/jobTemplate/metadata");
        assert!(cron.is_suspended(&json!({"spec": {"jobTemplate": {"spec": {"suspend": true}}}})));
        assert!(!cron.is_suspended(&json!({"spec": {"suspend": true}})));
        let lws = adapter_for("leaderworkerset.x-k8s.io", "v1", "LeaderWorkerSet").unwrap();
        assert!(lws.is_queued());
        assert!(!lws.is_suspended(&json!({"spec": {"suspend": true}})));
        assert!(!adapter_for("apps", "v1", "Deployment").unwrap().is_queued());
    }

    #[test]
    fn the_run_time_label_is_read_where_kueue_reads_each_kinds_workload() {
        let at =
            |group: &str, version: &str, kind: &str| adapter_for(group, version, kind).unwrap().run_time_labels_at();
        assert_eq!(at("batch", "v1", "Job"), ["/metadata"]);
        assert_eq!(at("batch", "v1", "CronJob"), ["/spec/jobTemplate/metadata"]);
        assert_eq!(
            at("leaderworkerset.x-k8s.io", "v1", "LeaderWorkerSet"),
            [
                "/metadata",
                "/spec/leaderWorkerTemplate/leaderTemplate/metadata",
                "/spec/leaderWorkerTemplate/workerTemplate/metadata"
            ]
        );
        assert!(at("apps", "v1", "Deployment").is_empty() && at("", "v1", "Pod").is_empty());
        for adapter in ADAPTERS.iter().filter(|adapter| adapter.is_queued()) {
            assert!(adapter.run_time_labels_at().contains(&adapter.queue_labels_at.to_owned()), "{}", adapter.kind);
        }
    }

    #[test]
    fn every_pod_set_pattern_is_one_of_its_kinds_template_patterns() {
        for adapter in ADAPTERS {
            let patterns: Vec<&str> = match adapter.templates {
                TemplateLayout::Single(template) => vec![template],
                TemplateLayout::PerItem { list, item } => vec![format!("{list}/*{item}").leak()],
                TemplateLayout::Patterns(patterns) => patterns
                    .iter()
                    .filter_map(|at| match at {
                        TemplateAt::PodTemplate(pattern) | TemplateAt::ReplicaMap(pattern) => Some(*pattern),
                        TemplateAt::Flat(_) => None,
                    })
                    .collect(),
                TemplateLayout::Pod | TemplateLayout::Embedded { .. } => vec![],
            };
            for pod_set in adapter.pod_sets {
                assert!(patterns.contains(&pod_set.template), "{} pod set {}", adapter.kind, pod_set.template);
            }
        }
    }

    #[test]
    fn pod_sets_count_pods_as_kueue_does() {
        let job = adapter_for("batch", "v1", "Job").unwrap();
        let sets = job.pod_sets(&json!({"spec": {"parallelism": 4, "completions": 8, "template": {"spec": {}}}}));
        assert_eq!(sets.iter().map(|set| set.count).collect::<Vec<_>>(), [4]);
        let capped = job.pod_sets(&json!({"spec": {"parallelism": 4, "completions": 2, "template": {"spec": {}}}}));
        assert_eq!(capped[0].count, 2);
        assert_eq!(job.pod_sets(&json!({"spec": {"template": {"spec": {}}}}))[0].count, 1);

        let jobset = adapter_for("jobset.x-k8s.io", "v1alpha2", "JobSet").unwrap();
        let sets = jobset.pod_sets(&json!({"spec": {"replicatedJobs": [
            {"name": "driver", "template": {"spec": {"template": {"spec": {}}}}},
            {"name": "workers", "replicas": 2, "template": {"spec": {"parallelism": 4, "template": {"spec": {}}}}},
        ]}}));
        assert_eq!(sets.iter().map(|set| set.count).collect::<Vec<_>>(), [1, 8]);
        assert_eq!(sets[1].template.metadata, "/spec/replicatedJobs/1/template/spec/template/metadata");

        let pytorch = adapter_for("kubeflow.org", "v1", "PyTorchJob").unwrap();
        let sets = pytorch.pod_sets(&json!({"spec": {"pytorchReplicaSpecs": {
            "Master": {"replicas": 1, "template": {"spec": {}}},
            "Worker": {"replicas": 7, "template": {"spec": {}}},
        }}}));
        assert_eq!(sets.iter().map(|set| set.count).collect::<Vec<_>>(), [1, 7]);

        let ray = adapter_for("ray.io", "v1", "RayCluster").unwrap();
        let sets = ray.pod_sets(&json!({"spec": {
            "headGroupSpec": {"template": {"spec": {}}},
            "workerGroupSpecs": [{"replicas": 2, "numOfHosts": 4, "template": {"spec": {}}}],
        }}));
        assert_eq!(sets.iter().map(|set| set.count).collect::<Vec<_>>(), [1, 8]);

        let lws = adapter_for("leaderworkerset.x-k8s.io", "v1", "LeaderWorkerSet").unwrap();
        let with_leader = lws.pod_sets(&json!({"spec": {"replicas": 3, "leaderWorkerTemplate": {
            "size": 4, "leaderTemplate": {"spec": {}}, "workerTemplate": {"spec": {}}}}}));
        assert_eq!(with_leader.iter().map(|set| (set.count, set.group)).collect::<Vec<_>>(), [(1, false), (3, true)]);
        let workers_only =
            lws.pod_sets(&json!({"spec": {"leaderWorkerTemplate": {"size": 4, "workerTemplate": {"spec": {}}}}}));
        assert_eq!(workers_only.iter().map(|set| set.count).collect::<Vec<_>>(), [4]);

        let deployment = adapter_for("apps", "v1", "Deployment").unwrap();
        assert!(deployment.pod_sets(&json!({"spec": {"replicas": 5, "template": {"spec": {}}}})).is_empty());
    }
}
