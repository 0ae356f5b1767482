//! Named pod presets (`preset: coredns`): the settings a shipped workload comes with, so a
//! scenario need not spell them out. A preset fills only what the pod leaves out: a key the
//! pod sets (a label, a named port, `readinessProbe`, `terminationGracePeriodSeconds`,
//! `termination`, `apps`) wins.

use super::model::{OnSigterm, Probe, Termination};
use sim_core::SimDuration;

/// One preset's settings.
#[derive(Debug, Clone, Copy)]
pub struct PodPreset {
    /// Its name as scenarios write it.
    pub name: &'static str,
    /// Labels of the pod template.
    pub labels: &'static [(&'static str, &'static str)],
    /// Named container ports.
    pub ports: &'static [(&'static str, u16)],
    /// The readiness probe's timing.
    pub probe: Probe,
    /// `terminationGracePeriodSeconds`.
    pub grace_period: SimDuration,
    /// What the container does on deletion.
    pub termination: Termination,
    /// The UDP port it serves on when the pod has no `apps`.
    pub udp_server_port: u16,
}

/// CoreDNS as kubeadm and `cluster/addons/dns/coredns/coredns.yaml.base` (kubernetes/
/// kubernetes) deploy it: pod label `k8s-app: kube-dns`; ports `dns` 53/UDP, `dns-tcp`
/// 53/TCP, `metrics` 9153/TCP; `readinessProbe: httpGet /ready :8181` with no timing set,
/// so Kubernetes' defaults (every 10 s, 3 failures, 1 success); no
/// `terminationGracePeriodSeconds`, so 30 s; no `preStop` hook. Its Corefile has
/// `health { lameduck 5s }`: on SIGTERM CoreDNS keeps serving for 5 s, then exits (the
/// `health` plugin's README: "lameduck will delay shutdown for DURATION"), and its `ready`
/// plugin "will not answer OK while CoreDNS is in lame duck mode prior to shutdown".
pub const COREDNS: PodPreset = PodPreset {
    name: "coredns",
    labels: &[("k8s-app", "kube-dns")],
    ports: &[("dns", 53), ("dns-tcp", 53), ("metrics", 9153)],
    probe: Probe::DEFAULT,
    grace_period: SimDuration::from_secs(30),
    termination: Termination {
        pre_stop_sleep: None,
        on_sigterm: OnSigterm::Lameduck(SimDuration::from_secs(5)),
        unready_on_sigterm: true,
    },
    udp_server_port: 53,
};

/// Every preset, by name.
pub const PRESETS: &[PodPreset] = &[COREDNS];

/// The preset named `name`, or the error text naming the known ones.
pub fn pod_preset(name: &str) -> Result<&'static PodPreset, String> {
    PRESETS.iter().find(|p| p.name == name).ok_or_else(|| {
        let known: Vec<&str> = PRESETS.iter().map(|p| p.name).collect();
        format!(
            "unknown preset {name:?}: expected one of {}",
            known.join(", ")
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn coredns_is_found_and_an_unknown_name_lists_the_known_ones() {
        assert_eq!(pod_preset("coredns").unwrap().name, "coredns");
        let e = pod_preset("kube-dns").unwrap_err();
        assert_eq!(e, "unknown preset \"kube-dns\": expected one of coredns");
    }
}
