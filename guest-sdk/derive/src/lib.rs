//! `#[derive(CustomResource)]`: the object type of a custom resource, from its spec struct.
//!
//! Use it through `wasmloop_sdk::CustomResource` (the SDK's `derive` feature); the SDK's
//! documentation has the examples and the tests.

#![warn(missing_docs)]
#![forbid(unsafe_code)]

use proc_macro::TokenStream;
use proc_macro2::{Span, TokenStream as TokenStream2};
use quote::quote;
use syn::{Data, DeriveInput, Error, LitStr, Type};

/// Derive the object type of a custom resource from its spec struct (used through
/// `wasmloop_sdk::CustomResource`; the SDK's `typed` tests and plugins/webapp exercise it):
///
/// ```text
/// #[derive(CustomResource, Serialize, Deserialize, Clone, Debug)]
/// #[resource(group = "example.com", version = "v1", kind = "Foo", namespaced, status = "FooStatus")]
/// pub struct FooSpec { pub replicas: i32 }
/// ```
///
/// generates `pub struct Foo { api_version, kind, metadata, spec: FooSpec, status:
/// Option<FooStatus>, extra }` with `Clone`, `Debug`, `Serialize` and `Deserialize`, `Foo::new(name,
/// spec)`, and `wasmloop_sdk::typed::Resource` (the kind's `KIND_REF`, `key()`, metadata).
/// `group` (empty for none), `version` and `kind` are required; `namespaced` (cluster-scoped
/// without it) and `status` (a type, none without it) are optional. The spec and status types
/// must implement `Clone`, `Debug`, `Serialize` and `Deserialize`; they keep unknown fields only
/// if they have a `#[serde(flatten)]` map for them.
#[proc_macro_derive(CustomResource, attributes(resource))]
pub fn derive_custom_resource(input: TokenStream) -> TokenStream {
    let input = syn::parse_macro_input!(input as DeriveInput);
    expand(&input).unwrap_or_else(Error::into_compile_error).into()
}

/// What `#[resource(...)]` says.
struct Args {
    group: String,
    version: String,
    kind: String,
    namespaced: bool,
    status: Option<Type>,
}

fn parse_args(input: &DeriveInput) -> Result<Args, Error> {
    let mut attrs = input.attrs.iter().filter(|a| a.path().is_ident("resource"));
    let Some(attr) = attrs.next() else {
        return Err(Error::new_spanned(
            &input.ident,
            "CustomResource needs #[resource(group = \"...\", version = \"...\", kind = \"...\")]",
        ));
    };
    if let Some(again) = attrs.next() {
        return Err(Error::new_spanned(again, "#[resource(...)] given twice"));
    }
    let (mut group, mut version, mut kind, mut namespaced, mut status) = (None, None, None, false, None);
    attr.parse_nested_meta(|meta| {
        let string = |meta: &syn::meta::ParseNestedMeta<'_>| -> Result<LitStr, Error> { meta.value()?.parse() };
        if meta.path.is_ident("group") {
            group = Some(string(&meta)?.value());
        } else if meta.path.is_ident("version") {
            version = Some(string(&meta)?.value());
        } else if meta.path.is_ident("kind") {
            kind = Some(string(&meta)?);
        } else if meta.path.is_ident("namespaced") {
            namespaced = true;
        } else if meta.path.is_ident("status") {
            status = Some(string(&meta)?.parse::<Type>()?);
        } else {
            return Err(meta.error("unknown argument: expected group, version, kind, namespaced or status"));
        }
        Ok(())
    })?;
    let missing = |what: &str| Error::new_spanned(attr, format!("#[resource(...)] needs {what} = \"...\""));
    let group = group.ok_or_else(|| missing("group"))?;
    let version = version.ok_or_else(|| missing("version"))?;
    let kind = kind.ok_or_else(|| missing("kind"))?;
    if version.is_empty() || version.contains('/') {
        return Err(Error::new_spanned(attr, "version must be a version such as v1 (the group goes in group)"));
    }
    if kind.value().is_empty() || syn::parse_str::<syn::Ident>(&kind.value()).is_err() {
        return Err(Error::new_spanned(kind, "kind must be a type name such as Foo"));
    }
    Ok(Args { group, version, kind: kind.value(), namespaced, status })
}

fn expand(input: &DeriveInput) -> Result<TokenStream2, Error> {
    if !matches!(input.data, Data::Struct(_)) {
        return Err(Error::new_spanned(&input.ident, "CustomResource derives from a spec struct"));
    }
    if !input.generics.params.is_empty() {
        return Err(Error::new_spanned(&input.generics, "CustomResource does not support generic spec structs"));
    }
    let args = parse_args(input)?;
    let spec = &input.ident;
    let vis = &input.vis;
    let name = syn::Ident::new(&args.kind, Span::call_site());
    if name == *spec {
        return Err(Error::new_spanned(spec, "the spec struct needs another name than the kind (e.g. FooSpec for Foo)"));
    }
    let api_version = if args.group.is_empty() { args.version.clone() } else { format!("{}/{}", args.group, args.version) };
    let kind = &args.kind;
    let namespaced = args.namespaced;
    let sdk = quote!(::wasmloop_sdk);
    let serde_path = "::wasmloop_sdk::__private::serde";
    let (status_field, status_init) = match &args.status {
        Some(status) => (
            quote! {
                /// `status`, if present.
                #[serde(default, skip_serializing_if = "::core::option::Option::is_none")]
                pub status: ::core::option::Option<#status>,
            },
            quote!(status: ::core::option::Option::None,),
        ),
        None => (quote!(), quote!()),
    };
    let doc = format!("`{api_version}` `{kind}`: a custom resource with spec [`{spec}`] (derived by `CustomResource`).");
    let new_doc = format!("A `{kind}` named `name` with this spec (set `metadata.namespace` too for a namespaced kind).");
    Ok(quote! {
        #[doc = #doc]
        #[derive(::core::clone::Clone, ::core::fmt::Debug, #sdk::__private::serde::Serialize, #sdk::__private::serde::Deserialize)]
        #[serde(crate = #serde_path, rename_all = "camelCase")]
        #vis struct #name {
            #[doc = concat!("`apiVersion`: `", #api_version, "`.")]
            #[serde(default)]
            pub api_version: ::std::string::String,
            #[doc = concat!("`kind`: `", #kind, "`.")]
            #[serde(default)]
            pub kind: ::std::string::String,
            /// Standard object metadata.
            #[serde(default)]
            pub metadata: #sdk::typed::ObjectMeta,
            /// `spec`.
            pub spec: #spec,
            #status_field
            /// Top-level fields not named above, kept as read.
            #[serde(flatten)]
            pub extra: #sdk::serde_json::Map<::std::string::String, #sdk::serde_json::Value>,
        }

        impl #name {
            #[doc = #new_doc]
            pub fn new(name: impl ::core::convert::Into<::std::string::String>, spec: #spec) -> Self {
                Self {
                    api_version: ::std::string::String::from(#api_version),
                    kind: ::std::string::String::from(#kind),
                    metadata: #sdk::typed::ObjectMeta::named(name),
                    spec,
                    #status_init
                    extra: #sdk::serde_json::Map::new(),
                }
            }
        }

        impl #sdk::typed::Resource for #name {
            const API_VERSION: &'static str = #api_version;
            const KIND: &'static str = #kind;
            const NAMESPACED: bool = #namespaced;
            fn metadata(&self) -> &#sdk::typed::ObjectMeta {
                &self.metadata
            }
            fn metadata_mut(&mut self) -> &mut #sdk::typed::ObjectMeta {
                &mut self.metadata
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn expand_str(src: &str) -> Result<String, String> {
        let input: DeriveInput = syn::parse_str(src).map_err(|e| e.to_string())?;
        expand(&input).map(|t| t.to_string()).map_err(|e| e.to_string())
    }

    #[test]
    fn generates_the_object_type_and_its_resource_impl() {
        let out = expand_str(
            r#"#[resource(group = "example.com", version = "v1", kind = "Foo", namespaced, status = "FooStatus")]
               pub(crate) struct FooSpec { replicas: i32 }"#,
        )
        .unwrap();
        for part in [
            "pub (crate) struct Foo",
            "pub spec : FooSpec",
            "Option < FooStatus >",
            "const API_VERSION : & 'static str = \"example.com/v1\"",
            "const NAMESPACED : bool = true",
            "crate = \"::wasmloop_sdk::__private::serde\"",
        ] {
            assert!(out.contains(part), "{part:?} missing from {out}");
        }
        let cluster = expand_str(r#"#[resource(group = "", version = "v1", kind = "Bar")] struct BarSpec;"#).unwrap();
        assert!(cluster.contains("\"v1\"") && cluster.contains("const NAMESPACED : bool = false"), "{cluster}");
        assert!(!cluster.contains("status"), "no status field without a status type: {cluster}");
    }

    #[test]
    fn bad_input_is_a_compile_error_naming_the_problem() {
        let cases = [
            ("struct FooSpec;", "CustomResource needs #[resource("),
            (r#"#[resource(version = "v1", kind = "Foo")] struct FooSpec;"#, "needs group"),
            (r#"#[resource(group = "g", kind = "Foo")] struct FooSpec;"#, "needs version"),
            (r#"#[resource(group = "g", version = "v1")] struct FooSpec;"#, "needs kind"),
            (r#"#[resource(group = "g", version = "g/v1", kind = "Foo")] struct FooSpec;"#, "version must be a version"),
            (r#"#[resource(group = "g", version = "v1", kind = "not a type")] struct FooSpec;"#, "kind must be a type name"),
            (r#"#[resource(group = "g", version = "v1", kind = "Foo", plural = "foos")] struct FooSpec;"#, "unknown argument"),
            (r#"#[resource(group = "g", version = "v1", kind = "Foo", status = "not a type!")] struct FooSpec;"#, ""),
            (r#"#[resource(group = "g", version = "v1", kind = "Foo")] #[resource(group = "g")] struct FooSpec;"#, "given twice"),
            (r#"#[resource(group = "g", version = "v1", kind = "Foo")] enum FooSpec { A }"#, "derives from a spec struct"),
            (r#"#[resource(group = "g", version = "v1", kind = "Foo")] struct FooSpec<T>(T);"#, "generic"),
            (r#"#[resource(group = "g", version = "v1", kind = "Foo")] struct Foo;"#, "another name than the kind"),
        ];
        for (src, message) in cases {
            let e = expand_str(src).unwrap_err();
            assert!(e.contains(message), "{src}: {e}");
        }
    }
}
