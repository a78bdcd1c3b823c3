//! A label selector given to the API: parsed, a bad one a 422 naming its
//! term; its SQL predicate is the store's (`store::selector`).

use domain::labels::Selector;
pub use store::selector::Predicate;

use crate::error::{ApiResult, field};

/// A selector as text, parsed; a bad one is a 422 on the parameter or field
/// `name`, naming the term at fault.
pub fn parse(name: &str, text: &str) -> ApiResult<Selector> {
    if text.contains('\0') {
        return Err(field(name, "must not contain a NUL character"));
    }
    Selector::parse(text).map_err(|e| field(name, e.to_string()))
}
