//! Services and EndpointSlices: unique keys and ports, each slice's Service defined.

use super::*;

/// Checks `services` and `endpointSlices`.
pub(super) fn check_services(
    ctx: &Ctx,
    doc: &ScenarioDoc,
) -> Result<(Vec<k8s::Service>, Option<Vec<k8s::EndpointSlice>>), ScenarioError> {
    // Services and slices.
    let mut services: Vec<k8s::Service> = Vec::new();
    // The keys seen so far: a set, as a list searched per Service is quadratic in the
    // number of Services (a 5,000-Service cluster spent seconds here).
    let mut service_keys: BTreeSet<String> = BTreeSet::new();
    for s in &doc.services {
        s.value.validate().map_err(|e| ctx.err(s, e.to_string()))?;
        names::check_dns1035_label("Service name", &s.value.metadata.name)
            .and_then(|_| names::check_dns1123_label("namespace", &s.value.metadata.namespace))
            .map_err(|m| ctx.err(s, m))?;
        if !service_keys.insert(s.value.key()) {
            return Err(ctx.err(s, format!("duplicate Service {}", s.value.key())));
        }
        // ValidateService: "spec.ports[i]: Duplicate value" for a repeated (port, protocol).
        let mut seen = BTreeSet::new();
        for (i, sp) in s.value.spec.ports.iter().enumerate() {
            if !seen.insert((sp.port, format!("{:?}", sp.protocol))) {
                return Err(ctx.err(
                    s,
                    format!(
                        "Service {}: spec.ports[{i}] repeats port {} {:?}: each (port, protocol) may appear once (Kubernetes refuses the Service)",
                        s.value.key(),
                        sp.port,
                        sp.protocol
                    ),
                ));
            }
        }
        services.push(s.value.clone());
    }
    let endpoint_slices = match &doc.endpoint_slices {
        None => None,
        Some(list) => {
            let mut v: Vec<k8s::EndpointSlice> = Vec::new();
            let mut slice_keys: BTreeSet<String> = BTreeSet::new();
            for s in &list.value {
                s.value.validate().map_err(|e| ctx.err(s, e.to_string()))?;
                if !slice_keys.insert(s.value.key()) {
                    return Err(ctx.err(s, format!("duplicate EndpointSlice {}", s.value.key())));
                }
                let svc = s.value.service_name().unwrap_or_default();
                if !service_keys.contains(&format!("{}/{svc}", s.value.metadata.namespace)) {
                    return Err(ctx.err(
                        s,
                        format!(
                            "EndpointSlice {} belongs to Service {}/{svc}, which is not defined",
                            s.value.key(),
                            s.value.metadata.namespace
                        ),
                    ));
                }
                v.push(s.value.clone());
            }
            Some(v)
        }
    };
    Ok((services, endpoint_slices))
}
