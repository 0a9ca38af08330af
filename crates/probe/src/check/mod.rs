//! `rdmakit check`'s judgement, with no cluster: what a check pod prints ([`dump`]) read back as
//! [`facts::PodFacts`], the environment judged against every pod's facts ([`env_lint`]), the data-path
//! matrix's pairs and cells ([`matrix`]), and the evidence: a versioned JSON report with its JSON Schema
//! ([`report`]) and one self-contained HTML page ([`html`]). The CLI gathers; this module decides.

pub mod dump;
pub mod env_lint;
pub mod facts;
pub mod html;
pub mod matrix;
pub mod report;

pub use dump::{DUMP_SCRIPT, Dump};
pub use env_lint::lint;
pub use facts::{PodFacts, PodInterface};
pub use matrix::{Cell, Measured, PairPlan, Pairs, flag_outliers, judge_cell, pairs, rounds};
pub use report::{CheckReport, NodeReport, SCHEMA};
