//! Scenario files: the YAML schema, loading with file/line/column errors, and the checked
//! model the simulation runs.
//!
//! - [`schema`]: the file as written (serde structures with spans).
//! - [`load`]: parsing and checking, [`ScenarioError`].
//! - [`model`]: the checked [`Scenario`].

pub mod load;
pub mod model;
pub mod schema;

pub use load::{load_file, load_str, ScenarioError};
pub use model::Scenario;
