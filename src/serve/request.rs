//! A request's fields, taken one by one with their expected types; what is left at the end
//! is a field the request does not take.

use super::{encode::type_name, ErrorKind, ServeError};
use crate::testkit::{SimDuration, SimTime};
use serde_json::{Map, Value};
use std::collections::BTreeMap;

/// One request object, its fields consumed as they are read.
pub(super) struct Req {
    fields: Map<String, Value>,
}

fn wrong_type(field: &str, expected: &str, got: &Value) -> ServeError {
    ServeError::new(
        ErrorKind::BadField,
        Some(field),
        expected,
        format!("{field} is a JSON {}", type_name(got)),
    )
}

impl Req {
    pub(super) fn new(mut fields: Map<String, Value>) -> Req {
        fields.remove("id");
        Req { fields }
    }

    /// The `op` string.
    pub(super) fn op(&mut self) -> Result<String, ServeError> {
        match self.fields.remove("op") {
            Some(Value::String(s)) => Ok(s),
            Some(other) => Err(wrong_type("op", "a string naming the request", &other)),
            None => Err(ServeError::new(
                ErrorKind::MissingField,
                Some("op"),
                "an \"op\" string naming the request (hello, node, flow, …)",
                "the object has no op".into(),
            )),
        }
    }

    /// Whether `field` is present (and not yet read).
    pub(super) fn has(&self, field: &str) -> bool {
        self.fields.contains_key(field)
    }

    /// Refuses a field that is not in `allowed` (checked before the request runs).
    pub(super) fn only(&self, allowed: &[&str]) -> Result<(), ServeError> {
        match self.fields.keys().find(|k| !allowed.contains(&k.as_str())) {
            None => Ok(()),
            Some(k) => Err(ServeError::new(
                ErrorKind::BadField,
                Some(k),
                &format!("only these fields: {}", allowed.join(", ")),
                format!("{k:?} is not a field of this request"),
            )),
        }
    }

    /// The raw value of `field`, if present.
    pub(super) fn take(&mut self, field: &str) -> Option<Value> {
        self.fields.remove(field)
    }

    pub(super) fn str(&mut self, field: &str) -> Result<Option<String>, ServeError> {
        match self.fields.remove(field) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s)),
            Some(other) => Err(wrong_type(field, "a string", &other)),
        }
    }

    pub(super) fn required_str(
        &mut self,
        field: &str,
        expected: &str,
    ) -> Result<String, ServeError> {
        self.str(field)?.ok_or_else(|| {
            ServeError::new(
                ErrorKind::MissingField,
                Some(field),
                expected,
                format!("the request has no {field}"),
            )
        })
    }

    /// A string or `null` (`podCidr`).
    pub(super) fn nullable_str(&mut self, field: &str) -> Result<Option<String>, ServeError> {
        match self.fields.remove(field) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s)),
            Some(other) => Err(wrong_type(field, "a string or null", &other)),
        }
    }

    pub(super) fn u64(&mut self, field: &str) -> Result<Option<u64>, ServeError> {
        match self.fields.remove(field) {
            None => Ok(None),
            Some(Value::Number(n)) if n.as_u64().is_some() => Ok(n.as_u64()),
            Some(other) => Err(wrong_type(field, "a non-negative integer", &other)),
        }
    }

    pub(super) fn bool(&mut self, field: &str) -> Result<Option<bool>, ServeError> {
        match self.fields.remove(field) {
            None => Ok(None),
            Some(Value::Bool(b)) => Ok(Some(b)),
            Some(other) => Err(wrong_type(field, "true or false", &other)),
        }
    }

    /// An object of strings, in key order (absent: empty).
    pub(super) fn str_map(&mut self, field: &str) -> Result<BTreeMap<String, String>, ServeError> {
        let expected = "an object whose values are strings";
        match self.fields.remove(field) {
            None => Ok(BTreeMap::new()),
            Some(Value::Object(m)) => m
                .into_iter()
                .map(|(k, v)| match v {
                    Value::String(s) => Ok((k, s)),
                    other => Err(wrong_type(&format!("{field}.{k}"), "a string", &other)),
                })
                .collect(),
            Some(other) => Err(wrong_type(field, expected, &other)),
        }
    }

    /// A duration: a string as the CLI takes one (`1.5s`, `2m`) or whole nanoseconds.
    pub(super) fn duration(&mut self, field: &str) -> Result<Option<SimDuration>, ServeError> {
        let expected = "a duration: a string such as \"1.5s\" or \"5m\", or whole nanoseconds";
        match self.fields.remove(field) {
            None => Ok(None),
            Some(Value::String(s)) => s
                .parse::<SimDuration>()
                .map(Some)
                .map_err(|e| ServeError::value(field, expected, e)),
            Some(Value::Number(n)) if n.as_u64().is_some() => {
                Ok(n.as_u64().map(SimDuration::from_nanos))
            }
            Some(other) => Err(wrong_type(field, expected, &other)),
        }
    }

    /// An instant: the duration since the start of the session.
    pub(super) fn instant(&mut self, field: &str) -> Result<Option<SimTime>, ServeError> {
        Ok(self
            .duration(field)?
            .map(|d| SimTime::ZERO.saturating_add(d)))
    }
}
