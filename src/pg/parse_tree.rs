//! What a utility statement's parse tree says, read out into plain Rust values: the settings it
//! gives a value to.
//!
//! Everything is read from the tree PostgreSQL's own parser built, so a name written with a
//! Unicode escape (`U&"randfl\0061ke.secret"`), in quotes or in capitals arrives here as the
//! parser resolved it.

use std::ffi::{c_char, CStr};

use pgrx::pg_sys::{self, NodeTag};

/// What one utility statement's parse tree holds that the secret's guard looks at.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct StatementFacts {
    /// Settings the statement gives a value to: `SET`, `ALTER SYSTEM SET`, `ALTER ROLE/DATABASE
    /// ... SET`, the `SET` clause of `CREATE/ALTER FUNCTION/PROCEDURE`. `RESET` and `SET ... TO
    /// DEFAULT` carry no value and are not listed.
    pub settings_given_values: Vec<String>,
}

/// The facts of a utility statement as `ProcessUtility` receives it.
///
/// # Safety
///
/// `node` is null or a node of a parse tree that stays allocated for the call.
pub(super) unsafe fn facts_of(node: *mut pg_sys::Node) -> StatementFacts {
    let mut facts = StatementFacts::default();
    // SAFETY: every pointer followed below is a field of a node of the tag just checked, as
    // PostgreSQL's parsenodes.h lays it out.
    unsafe {
        match tag(node) {
            Some(NodeTag::T_VariableSetStmt) => facts.settings_given_values.extend(value_given(node.cast())),
            Some(NodeTag::T_AlterSystemStmt) => {
                facts.settings_given_values.extend(value_given((*node.cast::<pg_sys::AlterSystemStmt>()).setstmt))
            }
            Some(NodeTag::T_AlterRoleSetStmt) => {
                facts.settings_given_values.extend(value_given((*node.cast::<pg_sys::AlterRoleSetStmt>()).setstmt))
            }
            Some(NodeTag::T_AlterDatabaseSetStmt) => {
                facts.settings_given_values.extend(value_given((*node.cast::<pg_sys::AlterDatabaseSetStmt>()).setstmt))
            }
            Some(NodeTag::T_CreateFunctionStmt) => {
                set_clauses(&mut facts, (*node.cast::<pg_sys::CreateFunctionStmt>()).options)
            }
            Some(NodeTag::T_AlterFunctionStmt) => {
                set_clauses(&mut facts, (*node.cast::<pg_sys::AlterFunctionStmt>()).actions)
            }
            _ => {}
        }
    }
    facts
}

/// The setting a `SET`-like statement gives a value to; `None` for RESET, DEFAULT and the rest.
///
/// # Safety
///
/// `set` is null or a `VariableSetStmt`.
unsafe fn value_given(set: *mut pg_sys::VariableSetStmt) -> Option<String> {
    // SAFETY: the caller's promise; `name` is a NUL-terminated string or null.
    unsafe {
        let set = set.as_ref()?;
        (set.kind == pg_sys::VariableSetKind::VAR_SET_VALUE).then(|| text(set.name)).flatten()
    }
}

/// The `SET` clauses (`DefElem "set"`) of a function definition's option list.
///
/// # Safety
///
/// `list` is null or a list of `DefElem` nodes.
unsafe fn set_clauses(facts: &mut StatementFacts, list: *mut pg_sys::List) {
    // SAFETY: the caller's promise; a "set" argument is a VariableSetStmt, as gram.y builds it.
    unsafe {
        for option in nodes(list) {
            let option = &*option.cast::<pg_sys::DefElem>();
            if text(option.defname).as_deref() == Some("set") {
                facts.settings_given_values.extend(value_given(option.arg.cast()));
            }
        }
    }
}

/// The tag of a node, or `None` for a null pointer.
///
/// # Safety
///
/// `node` is null or points to a node.
unsafe fn tag(node: *mut pg_sys::Node) -> Option<NodeTag> {
    // SAFETY: the caller's promise; every node starts with its tag.
    unsafe { node.as_ref().map(|node| node.type_) }
}

/// The pointers a list holds, in order; nothing for a null (empty) list.
///
/// # Safety
///
/// `list` is null or a pointer list that outlives the iteration.
unsafe fn nodes(list: *mut pg_sys::List) -> impl Iterator<Item = *mut pg_sys::Node> {
    // SAFETY: the caller's promise: `length` cells start at `elements`, and the cells of a
    // pointer list hold pointers.
    let cells: &[pg_sys::ListCell] = unsafe {
        match list.as_ref() {
            Some(list) if list.length > 0 => std::slice::from_raw_parts(list.elements, list.length as usize),
            _ => &[],
        }
    };
    // SAFETY: as above.
    cells.iter().map(|cell| unsafe { cell.ptr_value.cast() })
}

/// A C string as text; `None` for a null pointer. Text is not always valid UTF-8 in the
/// server's encoding: invalid bytes become U+FFFD, which no setting name contains.
///
/// # Safety
///
/// `text` is null or NUL-terminated.
unsafe fn text(text: *const c_char) -> Option<String> {
    // SAFETY: the caller's promise.
    (!text.is_null()).then(|| unsafe { CStr::from_ptr(text) }.to_string_lossy().into_owned())
}
