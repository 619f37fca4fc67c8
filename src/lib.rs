//! placeholder
#![deny(unsafe_code)]
pub mod error;
pub mod holders;
pub mod local;
pub mod namespace;
pub mod os;
pub mod segment;
pub mod strategy;
pub mod sync;
pub mod token;
pub use error::{Error, Result};
pub use namespace::Namespace;
pub use strategy::{Strategy, all_sharing_strategies, set_sharing_strategy, sharing_strategy};
