//! Small pieces of generated Rust, shared by the bindings and the op families' emitters:
//! identifiers from manifest names (refused, never a panic, when a name is not one), integer
//! literals, element types and doc comments.

use proc_macro2::{Ident, Literal, Span, TokenStream};
use quote::quote;

use crate::error::{Error, Result};
use crate::spec::model::DType;

/// A name from the manifest as an identifier. Names are checked before anything is emitted
/// (`bindings::check_names`); this refuses anything else instead of letting `Ident::new` panic.
pub fn ident(name: &str) -> Result<Ident> {
    match crate::escape::rust_name_problem(name, crate::escape::DERIVED_NAME) {
        None => Ok(Ident::new(name, Span::call_site())),
        Some(problem) => Err(Error::internal(format!(
            "bindings: `{}` cannot be a Rust identifier ({problem})",
            crate::escape::shown(name)
        ))),
    }
}

pub fn u32_lit(v: u32) -> Literal {
    Literal::u32_unsuffixed(v)
}

pub fn u64_lit(v: u64) -> Literal {
    Literal::u64_unsuffixed(v)
}

pub fn usize_lit(v: usize) -> Literal {
    Literal::usize_unsuffixed(v)
}

/// The Rust element type of a dtype.
pub fn elem_type(d: DType) -> TokenStream {
    match d {
        DType::F16 => quote!(::half::f16),
        DType::Bf16 => quote!(::half::bf16),
        DType::F32 => quote!(f32),
    }
}

/// Doc attributes, one per line (an empty line stays empty).
pub fn doc_lines<S: AsRef<str>>(lines: &[S]) -> TokenStream {
    let lines = lines.iter().map(|l| {
        // Doc text names instances and arguments; escaped, none of it can end the comment.
        let l = crate::escape::comment(l.as_ref());
        let text = if l.is_empty() {
            String::new()
        } else {
            format!(" {l}")
        };
        quote!(#[doc = #text])
    });
    quote!(#(#lines)*)
}
