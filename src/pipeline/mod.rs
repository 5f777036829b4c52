//! The pipeline engine, which knows nothing of LLMs: the pipeline file's types ([`spec`]),
//! validation and planning into a DAG of stages with the sweep expanded ([`plan`]), graph
//! rendering ([`render`]), the JSON Schema ([`mod@schema`]) and run records ([`record`]).
//!
//! `validate` runs in milliseconds and allocates no tensor: YAML → spec → plan, every key,
//! value, file, `needs:` edge and artifact checked, each problem reported with its line and
//! column and a fix.

pub mod attempt;
mod data_spec;
mod de;
pub mod error;
pub mod inputs;
mod kinds;
pub mod plan;
pub mod record;

pub mod runner;
pub mod schema;
pub mod spec;
pub mod yaml;

pub use error::{Diagnostic, Problem, ValidationError};
pub use plan::{
    validate, validate_source, validate_with, ArtifactKind, Cell, CellId, GraphFormat, Override,
    Plan, Scope, StageNode, ValidateOptions,
};
pub use record::{cell_is_finished, RecordError, RunRecord};
pub use schema::{schema, schema_json};
pub use spec::{PipelineSpec, StageKind, StageOptions, StageSpec};
