//! Native builds: cache reads and logs go to a thread-local backend (the `testing` fake), since
//! the component's imports exist only inside a wasm host.

use std::cell::RefCell;
use std::rc::Rc;

use crate::cache::Error;
use crate::log::Level;
use crate::object::ObjectMeta;

/// A metadata record and its declared fields.
pub(crate) type MetaRecord = (ObjectMeta, Vec<Option<String>>);
use crate::types::KindRef;

/// What answers cache reads and takes logs on native builds.
#[cfg_attr(not(feature = "testing"), allow(dead_code))]
pub(crate) trait Backend {
    fn get(
        &self,
        kind: &KindRef,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Option<String>, Error>;
    fn list(
        &self,
        kind: &KindRef,
        namespace: Option<&str>,
        selector: Option<&str>,
    ) -> Result<Vec<String>, Error>;
    fn by_index(&self, kind: &KindRef, index: &str, value: &str) -> Result<Vec<String>, Error>;
    /// Metadata reads, with the fields the plugin declared for `kind`.
    fn metas(&self, kind: &KindRef, objects: Vec<String>) -> Vec<MetaRecord>;
    fn log(&self, level: Level, message: &str);
}

thread_local! {
    static BACKEND: RefCell<Option<Rc<dyn Backend>>> = const { RefCell::new(None) };
}

/// Restores the previously installed backend when dropped.
#[cfg_attr(not(feature = "testing"), allow(dead_code))]
pub(crate) struct Installed(Option<Rc<dyn Backend>>);

impl Drop for Installed {
    fn drop(&mut self) {
        let prev = self.0.take();
        BACKEND.with(|b| *b.borrow_mut() = prev);
    }
}

/// Make `backend` answer this thread's reads until the guard is dropped.
#[cfg_attr(not(feature = "testing"), allow(dead_code))]
pub(crate) fn install(backend: Rc<dyn Backend>) -> Installed {
    Installed(BACKEND.with(|b| b.borrow_mut().replace(backend)))
}

fn current() -> Option<Rc<dyn Backend>> {
    BACKEND.with(|b| b.borrow().clone())
}

pub(crate) fn cache_get(
    kind: &KindRef,
    namespace: Option<&str>,
    name: &str,
) -> Result<Option<String>, Error> {
    current().ok_or(Error::NoHost)?.get(kind, namespace, name)
}

pub(crate) fn cache_list(
    kind: &KindRef,
    namespace: Option<&str>,
    selector: Option<&str>,
) -> Result<Vec<String>, Error> {
    current()
        .ok_or(Error::NoHost)?
        .list(kind, namespace, selector)
}

pub(crate) fn cache_by_index(
    kind: &KindRef,
    index: &str,
    value: &str,
) -> Result<Vec<String>, Error> {
    current().ok_or(Error::NoHost)?.by_index(kind, index, value)
}

pub(crate) fn cache_get_meta(
    kind: &KindRef,
    namespace: Option<&str>,
    name: &str,
) -> Result<Option<MetaRecord>, Error> {
    let backend = current().ok_or(Error::NoHost)?;
    let found = backend.get(kind, namespace, name)?;
    Ok(backend.metas(kind, found.into_iter().collect()).pop())
}

pub(crate) fn cache_list_meta(
    kind: &KindRef,
    namespace: Option<&str>,
    selector: Option<&str>,
) -> Result<Vec<MetaRecord>, Error> {
    let backend = current().ok_or(Error::NoHost)?;
    let found = backend.list(kind, namespace, selector)?;
    Ok(backend.metas(kind, found))
}

pub(crate) fn cache_by_index_meta(
    kind: &KindRef,
    index: &str,
    value: &str,
) -> Result<Vec<MetaRecord>, Error> {
    let backend = current().ok_or(Error::NoHost)?;
    let found = backend.by_index(kind, index, value)?;
    Ok(backend.metas(kind, found))
}

pub(crate) fn log(level: Level, message: &str) {
    match current() {
        Some(b) => b.log(level, message),
        None => eprintln!("[{level:?}] {message}"),
    }
}
