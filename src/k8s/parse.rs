//! Reading a YAML stream of Services and EndpointSlices.

use super::{
    AddressType, Endpoint, EndpointPort, EndpointSlice, ObjectMeta, Service, ServiceSpec,
    ServiceStatus, ValidationError,
};
use serde::Deserialize;

/// A Service or an EndpointSlice read by [`parse_objects`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum K8sObject {
    /// A core/v1 Service.
    Service(Service),
    /// A discovery.k8s.io/v1 EndpointSlice.
    EndpointSlice(EndpointSlice),
}

/// Why a YAML stream of Kubernetes objects could not be read.
#[derive(Debug, thiserror::Error)]
pub enum K8sError {
    /// The YAML did not parse, or a field had the wrong type or an invalid value (a bad IP, a
    /// port out of range, an unknown protocol). Line and column are 1-based.
    #[error("line {line}, column {column}: {message}")]
    Yaml {
        /// Line of the offending node (0 when unknown).
        line: u64,
        /// Column of the offending node (0 when unknown).
        column: u64,
        /// What was wrong and what was expected.
        message: String,
    },
    /// A document's `kind` is neither Service, EndpointSlice, nor a List of them.
    #[error("document {document} ({item}): unsupported kind {kind:?}: expected Service, EndpointSlice, or a List of them")]
    UnsupportedKind {
        /// 1-based document number in the stream.
        document: usize,
        /// Where in the document (`top level` or `items[3]`).
        item: String,
        /// The kind found (empty when missing).
        kind: String,
    },
    /// A required part is missing for the object's kind (a Service without `spec`, a slice
    /// without `addressType`).
    #[error("document {document} ({item}): {kind} {name}: missing {field}")]
    Missing {
        /// 1-based document number.
        document: usize,
        /// Where in the document.
        item: String,
        /// The kind.
        kind: String,
        /// `ns/name`.
        name: String,
        /// The missing field.
        field: String,
    },
    /// A check across fields failed (see [`ValidationError`]).
    #[error("document {document} ({item}): {source}")]
    Invalid {
        /// 1-based document number.
        document: usize,
        /// Where in the document.
        item: String,
        /// The failed check.
        source: ValidationError,
    },
}

/// The union of the top-level fields of every kind we read, so one pass of the YAML reader
/// checks every field with its line number whatever the kind. (`spec`/`status` are Service
/// fields; `addressType`/`endpoints`/`ports` EndpointSlice fields; `items` a List's.)
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct AnyObject {
    #[serde(default)]
    kind: String,
    #[serde(default)]
    metadata: Option<ObjectMeta>,
    #[serde(default)]
    spec: Option<ServiceSpec>,
    #[serde(default)]
    status: Option<ServiceStatus>,
    #[serde(default)]
    address_type: Option<AddressType>,
    #[serde(default)]
    endpoints: Option<Vec<Endpoint>>,
    #[serde(default)]
    ports: Option<Vec<EndpointPort>>,
    #[serde(default)]
    items: Option<Vec<AnyObject>>,
}

fn yaml_error(e: serde_saphyr::Error) -> K8sError {
    let (line, column) = e
        .location()
        .map(|l| (l.line(), l.column()))
        .unwrap_or((0, 0));
    // The plain message, without the source snippet the default rendering adds.
    let message = e.without_snippet().to_string();
    K8sError::Yaml {
        line,
        column,
        message,
    }
}

/// Reads Services and EndpointSlices from YAML: a single object, several documents separated
/// by `---`, or `kind: List` (also `ServiceList`, `EndpointSliceList`) with `items`, as
/// `kubectl get -o yaml` prints them. Objects come back in input order, each validated.
pub fn parse_objects(text: &str) -> Result<Vec<K8sObject>, K8sError> {
    let docs: Vec<AnyObject> = serde_saphyr::from_multiple(text).map_err(yaml_error)?;
    let mut out = Vec::new();
    for (i, doc) in docs.into_iter().enumerate() {
        let document = i + 1;
        match doc.kind.as_str() {
            "List" | "ServiceList" | "EndpointSliceList" => {
                for (j, item) in doc.items.unwrap_or_default().into_iter().enumerate() {
                    out.push(convert(item, document, format!("items[{j}]"))?);
                }
            }
            _ => out.push(convert(doc, document, "top level".to_string())?),
        }
    }
    Ok(out)
}

fn convert(o: AnyObject, document: usize, item: String) -> Result<K8sObject, K8sError> {
    let meta = o.metadata.unwrap_or_default();
    let name = format!("{}/{}", meta.namespace, meta.name);
    let missing = |kind: &str, field: &str| K8sError::Missing {
        document,
        item: item.clone(),
        kind: kind.to_string(),
        name: name.clone(),
        field: field.to_string(),
    };
    let obj = match o.kind.as_str() {
        "Service" => K8sObject::Service(Service {
            api_version: None,
            kind: None,
            metadata: meta.clone(),
            spec: o.spec.ok_or_else(|| missing("Service", "spec"))?,
            status: o.status.unwrap_or_default(),
        }),
        "EndpointSlice" => K8sObject::EndpointSlice(EndpointSlice {
            api_version: None,
            kind: None,
            metadata: meta.clone(),
            address_type: o
                .address_type
                .ok_or_else(|| missing("EndpointSlice", "addressType"))?,
            endpoints: o.endpoints.unwrap_or_default(),
            ports: o.ports.unwrap_or_default(),
        }),
        other => {
            return Err(K8sError::UnsupportedKind {
                document,
                item,
                kind: other.to_string(),
            })
        }
    };
    let checked = match &obj {
        K8sObject::Service(s) => s.validate(),
        K8sObject::EndpointSlice(s) => s.validate(),
    };
    checked.map_err(|source| K8sError::Invalid {
        document,
        item,
        source,
    })?;
    Ok(obj)
}

impl Service {
    /// Reads one Service from YAML and validates it.
    pub fn from_yaml(text: &str) -> Result<Service, K8sError> {
        match one(text)? {
            K8sObject::Service(s) => Ok(s),
            K8sObject::EndpointSlice(s) => Err(K8sError::UnsupportedKind {
                document: 1,
                item: "top level".into(),
                kind: format!(
                    "EndpointSlice (named {}) where a Service was expected",
                    s.key()
                ),
            }),
        }
    }
}

impl EndpointSlice {
    /// Reads one EndpointSlice from YAML and validates it.
    pub fn from_yaml(text: &str) -> Result<EndpointSlice, K8sError> {
        match one(text)? {
            K8sObject::EndpointSlice(s) => Ok(s),
            K8sObject::Service(s) => Err(K8sError::UnsupportedKind {
                document: 1,
                item: "top level".into(),
                kind: format!(
                    "Service (named {}) where an EndpointSlice was expected",
                    s.key()
                ),
            }),
        }
    }
}

fn one(text: &str) -> Result<K8sObject, K8sError> {
    let mut all = parse_objects(text)?;
    if all.len() != 1 {
        return Err(K8sError::Yaml {
            line: 0,
            column: 0,
            message: format!("expected exactly one object, found {}", all.len()),
        });
    }
    Ok(all.remove(0))
}
