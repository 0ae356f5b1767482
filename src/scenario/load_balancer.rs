//! `cloudLoadBalancer:`: the cloud's passthrough load balancer in front of every
//! `type: LoadBalancer` Service with an IPv4 `status.loadBalancer.ingress` IP, and how it
//! health-checks the nodes of an `externalTrafficPolicy: Local` Service on its
//! `healthCheckNodePort` (docs/kube-proxy-model.md §13, "Load balancers and
//! `healthCheckNodePort`"; the simulation side is `cluster::sim::load_balancer`).
//!
//! The defaults are the health check the GCE cloud provider creates for such a Service
//! (kubernetes/cloud-provider-gcp `providers/gce/gce.go`: `gceHcCheckIntervalSeconds = 8`,
//! `gceHcTimeoutSeconds = 1`, `gceHcHealthyThreshold = 1`, `gceHcUnhealthyThreshold = 3`,
//! "Defaults to 3 * 8 = 24 seconds before the LB will steer traffic away"; the same values in
//! ingress-gce's `healthchecksl4`). The AWS cloud provider's for an NLB with
//! `externalTrafficPolicy: Local` are interval 10 s, timeout 5 s (its `defaultElbHC*`: 10 s, 5 s,
//! 2 healthy, 6 unhealthy for a classic ELB; 30 s, 10 s, 3 and 3 for an NLB with
//! `externalTrafficPolicy: Cluster`); a scenario sets those explicitly.

use super::load::Ctx;
use super::schema::{Duration, S};
use super::ScenarioError;
use serde::Deserialize;
use sim_core::SimDuration;

/// GCE's `gceHcCheckIntervalSeconds`: 8 s between checks of a node.
pub const DEFAULT_INTERVAL: SimDuration = SimDuration::from_secs(8);
/// GCE's `gceHcTimeoutSeconds`: a check not answered within 1 s fails.
pub const DEFAULT_TIMEOUT: SimDuration = SimDuration::from_secs(1);
/// GCE's `gceHcHealthyThreshold`: one passed check makes a node healthy.
pub const DEFAULT_HEALTHY_THRESHOLD: u32 = 1;
/// GCE's `gceHcUnhealthyThreshold`: three failed checks in a row make it unhealthy.
pub const DEFAULT_UNHEALTHY_THRESHOLD: u32 = 3;
/// The largest threshold accepted (Google Cloud's and AWS's health check APIs accept 1–10
/// and 2–10).
pub const MAX_THRESHOLD: u32 = 10;
/// How long the load balancer's connection tracking keeps an idle flow on its node: the
/// external passthrough Network Load Balancer's idle timeout, 600 s ("Traffic distribution for
/// external passthrough Network Load Balancers", connection tracking).
pub const FLOW_IDLE_TIMEOUT: SimDuration = SimDuration::from_secs(600);

/// `cloudLoadBalancer:` as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct CloudLoadBalancerDoc {
    /// How it checks the nodes of an `externalTrafficPolicy: Local` Service.
    #[serde(default)]
    pub health_check: Option<S<HealthCheckDoc>>,
}

/// `cloudLoadBalancer.healthCheck:` as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct HealthCheckDoc {
    /// Time between two checks of a node (default 8s).
    #[serde(default)]
    pub interval: Option<S<Duration>>,
    /// How long a check waits for its answer (default 1s; at most `interval`).
    #[serde(default)]
    pub timeout: Option<S<Duration>>,
    /// Checks passed in a row that make an unhealthy node healthy (default 1).
    #[serde(default)]
    pub healthy_threshold: Option<S<u32>>,
    /// Checks failed in a row that make a healthy node unhealthy (default 3).
    #[serde(default)]
    pub unhealthy_threshold: Option<S<u32>>,
    /// When the first round of checks is sent (default 0s).
    #[serde(default)]
    pub start: Option<S<Duration>>,
}

/// The load balancer's health check of `healthCheckNodePort`, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HealthCheck {
    /// Time between two checks of a node.
    pub interval: SimDuration,
    /// How long a check waits for its answer.
    pub timeout: SimDuration,
    /// Passed checks in a row that make a node healthy.
    pub healthy_threshold: u32,
    /// Failed checks in a row that make a node unhealthy.
    pub unhealthy_threshold: u32,
    /// The first round's instant.
    pub start: SimDuration,
}

impl Default for HealthCheck {
    fn default() -> Self {
        HealthCheck {
            interval: DEFAULT_INTERVAL,
            timeout: DEFAULT_TIMEOUT,
            healthy_threshold: DEFAULT_HEALTHY_THRESHOLD,
            unhealthy_threshold: DEFAULT_UNHEALTHY_THRESHOLD,
            start: SimDuration::ZERO,
        }
    }
}

/// The cloud load balancer's settings (`cloudLoadBalancer:`; GCE's defaults without it).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CloudLoadBalancer {
    /// The health check of an `externalTrafficPolicy: Local` Service's nodes.
    pub health_check: HealthCheck,
}

fn threshold(
    ctx: &Ctx,
    v: Option<&S<u32>>,
    name: &str,
    default: u32,
) -> Result<u32, ScenarioError> {
    let Some(v) = v else { return Ok(default) };
    if v.value == 0 || v.value > MAX_THRESHOLD {
        return Err(ctx.err(
            v,
            format!(
                "cloudLoadBalancer.healthCheck.{name} {} is out of range: expected 1 to {MAX_THRESHOLD} checks",
                v.value
            ),
        ));
    }
    Ok(v.value)
}

/// Checks `cloudLoadBalancer:` (GCE's defaults where it, or a field of it, is left out).
pub(super) fn convert(
    ctx: &Ctx,
    doc: Option<&S<CloudLoadBalancerDoc>>,
) -> Result<CloudLoadBalancer, ScenarioError> {
    let Some(hc) = doc.and_then(|d| d.value.health_check.as_ref()) else {
        return Ok(CloudLoadBalancer::default());
    };
    let hc = &hc.value;
    let interval = match &hc.interval {
        Some(i) if i.value.get().is_zero() => return Err(ctx.err(
            i,
            "cloudLoadBalancer.healthCheck.interval 0s: expected a positive duration (8s is GCE's)",
        )),
        Some(i) => i.value.get(),
        None => DEFAULT_INTERVAL,
    };
    let timeout = match &hc.timeout {
        Some(t) if t.value.get().is_zero() => {
            return Err(ctx.err(
                t,
                "cloudLoadBalancer.healthCheck.timeout 0s: expected a positive duration (1s is GCE's)",
            ))
        }
        // Google Cloud refuses a health check whose timeout is longer than its interval.
        Some(t) if t.value.get() > interval => {
            return Err(ctx.err(
                t,
                format!(
                    "cloudLoadBalancer.healthCheck.timeout {} is longer than the interval {interval}: expected at most the interval",
                    t.value
                ),
            ))
        }
        Some(t) => t.value.get(),
        None => DEFAULT_TIMEOUT.min(interval),
    };
    Ok(CloudLoadBalancer {
        health_check: HealthCheck {
            interval,
            timeout,
            healthy_threshold: threshold(
                ctx,
                hc.healthy_threshold.as_ref(),
                "healthyThreshold",
                DEFAULT_HEALTHY_THRESHOLD,
            )?,
            unhealthy_threshold: threshold(
                ctx,
                hc.unhealthy_threshold.as_ref(),
                "unhealthyThreshold",
                DEFAULT_UNHEALTHY_THRESHOLD,
            )?,
            start: hc
                .start
                .as_ref()
                .map_or(SimDuration::ZERO, |s| s.value.get()),
        },
    })
}

/// A `cloudLoadBalancer:` that no Service uses: none in `services:` or in a `createService` /
/// `updateService` event is `type: LoadBalancer`, so the settings would take no part in the
/// run; said at the field rather than ignored.
pub(super) fn unused_warning(
    ctx: &Ctx,
    doc: &super::schema::ScenarioDoc,
) -> Option<super::warnings::ScenarioWarning> {
    let given = doc.cloud_load_balancer.as_ref()?;
    let is_lb = |s: &crate::k8s::Service| s.spec.type_ == crate::k8s::ServiceType::LoadBalancer;
    let any = doc.services.iter().any(|s| is_lb(&s.value))
        || doc.events.iter().any(|e| {
            let d = &e.value;
            d.create_service
                .iter()
                .chain(d.update_service.iter())
                .any(|s| is_lb(&s.value))
        });
    (!any).then(|| super::warnings::ScenarioWarning {
        file: ctx.file().to_string(),
        line: given.referenced.line(),
        column: given.referenced.column(),
        message: "cloudLoadBalancer: no Service of the scenario (nor one an event creates or updates) is `type: LoadBalancer`, so the load balancer and its health checks take no part in the run".to_string(),
    })
}
