//! What a statement's parse tree says, read out into plain Rust values: the settings a utility
//! statement gives a value to, the string constants of a query, and the source text PostgreSQL
//! keeps unparsed until it runs (DO blocks, function bodies).
//!
//! Everything is read from the tree PostgreSQL's own parser built, so a name written with a
//! Unicode escape (`U&"randfl\0061ke.secret"`), in quotes or in capitals arrives here as the
//! parser resolved it, and a string constant arrives decoded.

use std::ffi::{c_char, c_void, CStr};

use pgrx::pg_sys::{self, NodeTag};

use super::unguarded;

/// What one statement's parse tree holds that the secret's guard looks at.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct StatementFacts {
    /// Settings the statement gives a value to: `SET`, `ALTER SYSTEM SET`, `ALTER ROLE/DATABASE
    /// ... SET`, the `SET` clause of `CREATE/ALTER FUNCTION/PROCEDURE`. `RESET` and `SET ... TO
    /// DEFAULT` carry no value and are not listed.
    pub settings_given_values: Vec<String>,
    /// The string constants of a query (`SELECT`, `INSERT`, `UPDATE`, `DELETE`, `MERGE`, `CALL`,
    /// the arguments of `EXECUTE`, and the queries that `EXPLAIN`, `PREPARE`, `DECLARE`,
    /// `CREATE TABLE AS`, `CREATE VIEW` and `COPY` wrap), as the parser decoded them.
    pub string_constants: Vec<String>,
    /// Source text that PostgreSQL parses only when it runs: DO blocks and function bodies.
    pub unparsed_bodies: Vec<String>,
    /// The query calls `set_config()` with a setting name that is not a constant: only running
    /// it tells which setting it sets.
    pub sets_computed_setting: bool,
    /// The query was too deeply nested to walk within the stack limit: its string constants
    /// are not all listed.
    pub incomplete: bool,
}

/// The facts of one parse tree node: a utility statement as `ProcessUtility` receives it, or a
/// raw statement from the parser. Only utility statements and the query wrappers above are
/// examined; query string constants are collected only when `with_constants` is set.
///
/// # Safety
///
/// `node` is null or a node of a parse tree that stays allocated for the call.
pub(super) unsafe fn facts_of(node: *mut pg_sys::Node, with_constants: bool) -> StatementFacts {
    let mut facts = StatementFacts::default();
    // SAFETY: the caller's promise, passed on.
    unsafe { collect(node, with_constants, &mut facts) };
    facts
}

/// Parses `text` as the server's parser does and returns each statement's facts, string
/// constants included.
///
/// For the log hook, which runs inside error reporting: PostgreSQL's parser is called without
/// pgrx's guard (see `unguarded`), so this raises an ERROR only where PostgreSQL's own parser
/// would. Call it only on text that PostgreSQL has just parsed without error, such as a
/// statement it is logging; it then fails only if memory runs out.
pub fn parse(text: &CStr) -> Vec<StatementFacts> {
    // SAFETY: the trees are built in a memory context of their own, read while it exists and
    // dropped with it; `text` is NUL-terminated. An ERROR from the parser leaves the context to
    // be freed with its parent, the current context.
    unsafe {
        let context = unguarded::alloc_set_context_create(
            pg_sys::CurrentMemoryContext,
            c"randflake_pg statement check".as_ptr(),
            0,
            pg_sys::ALLOCSET_SMALL_INITSIZE as usize,
            pg_sys::ALLOCSET_DEFAULT_MAXSIZE as usize,
        );
        let previous = pg_sys::MemoryContextSwitchTo(context);
        let statements = unguarded::raw_parser(text.as_ptr(), pg_sys::RawParseMode::RAW_PARSE_DEFAULT);
        let facts = nodes(statements).map(|raw| facts_of((*raw.cast::<pg_sys::RawStmt>()).stmt, true)).collect();
        pg_sys::MemoryContextSwitchTo(previous);
        unguarded::memory_context_delete(context);
        facts
    }
}

/// # Safety
///
/// As for [`facts_of`].
unsafe fn collect(node: *mut pg_sys::Node, with_constants: bool, facts: &mut StatementFacts) {
    // SAFETY: every pointer followed below is a field of a node of the tag just checked, as
    // PostgreSQL's parsenodes.h lays it out; lists hold nodes (or String nodes where noted).
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
            Some(NodeTag::T_CreateFunctionStmt) => options(facts, (*node.cast::<pg_sys::CreateFunctionStmt>()).options),
            Some(NodeTag::T_AlterFunctionStmt) => options(facts, (*node.cast::<pg_sys::AlterFunctionStmt>()).actions),
            Some(NodeTag::T_DoStmt) => options(facts, (*node.cast::<pg_sys::DoStmt>()).args),
            Some(_) if !with_constants => {}
            Some(NodeTag::T_ExplainStmt) => collect((*node.cast::<pg_sys::ExplainStmt>()).query, true, facts),
            Some(NodeTag::T_PrepareStmt) => collect((*node.cast::<pg_sys::PrepareStmt>()).query, true, facts),
            Some(NodeTag::T_DeclareCursorStmt) => {
                collect((*node.cast::<pg_sys::DeclareCursorStmt>()).query, true, facts)
            }
            Some(NodeTag::T_CreateTableAsStmt) => {
                collect((*node.cast::<pg_sys::CreateTableAsStmt>()).query, true, facts)
            }
            Some(NodeTag::T_ViewStmt) => collect((*node.cast::<pg_sys::ViewStmt>()).query, true, facts),
            Some(NodeTag::T_CopyStmt) => collect((*node.cast::<pg_sys::CopyStmt>()).query, true, facts),
            Some(NodeTag::T_CallStmt) => {
                string_constants(facts, (*node.cast::<pg_sys::CallStmt>()).funccall.cast());
            }
            Some(NodeTag::T_ExecuteStmt) => {
                string_constants(facts, (*node.cast::<pg_sys::ExecuteStmt>()).params.cast());
            }
            Some(
                NodeTag::T_SelectStmt
                | NodeTag::T_InsertStmt
                | NodeTag::T_UpdateStmt
                | NodeTag::T_DeleteStmt
                | NodeTag::T_MergeStmt,
            ) => string_constants(facts, node),
            _ => {}
        }
    }
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

/// The `SET` clauses (`DefElem "set"`) and bodies (`DefElem "as"`) of a function definition or
/// DO block's option list.
///
/// # Safety
///
/// `list` is null or a list of `DefElem` nodes.
unsafe fn options(facts: &mut StatementFacts, list: *mut pg_sys::List) {
    // SAFETY: the caller's promise; a "set" argument is a VariableSetStmt, an "as" argument a
    // String node (DO) or a list of String nodes (function bodies), as gram.y builds them.
    unsafe {
        for option in nodes(list) {
            let option = &*option.cast::<pg_sys::DefElem>();
            match text(option.defname).as_deref() {
                Some("set") => facts.settings_given_values.extend(value_given(option.arg.cast())),
                Some("as") if tag(option.arg) == Some(NodeTag::T_List) => {
                    facts.unparsed_bodies.extend(nodes(option.arg.cast()).filter_map(|body| string_value(body)))
                }
                Some("as") => facts.unparsed_bodies.extend(string_value(option.arg)),
                _ => {}
            }
        }
    }
}

/// Every string constant under `node`, found with PostgreSQL's walker for raw parse trees. The
/// walk of a tree too deep for the stack limit stops there and is marked
/// [`incomplete`](StatementFacts::incomplete).
///
/// # Safety
///
/// `node` is null or a raw query tree, or a node such a tree contains.
unsafe fn string_constants(facts: &mut StatementFacts, node: *mut pg_sys::Node) {
    /// Not guarded by pgrx, for the log hook (see `unguarded`); returns true to stop the walk.
    ///
    /// # Safety
    ///
    /// Called by the walker with a node of the tree and the facts passed below.
    unsafe extern "C-unwind" fn visit(node: *mut pg_sys::Node, facts: *mut c_void) -> bool {
        // SAFETY: `facts` is the StatementFacts passed below; a FuncCall's name is a list of
        // String nodes and its arguments a list of nodes. The walker checks the stack depth
        // itself and raises an ERROR past the limit: it is not entered that deep.
        unsafe {
            let facts = &mut *facts.cast::<StatementFacts>();
            if unguarded::stack_is_too_deep() {
                facts.incomplete = true;
                return true;
            }
            match tag(node) {
                Some(NodeTag::T_A_Const) => facts.string_constants.extend(string_constant(node)),
                Some(NodeTag::T_FuncCall) => {
                    let call = &*node.cast::<pg_sys::FuncCall>();
                    let name = nodes(call.funcname).last().and_then(|name| string_value(name));
                    if name.as_deref() == Some("set_config") {
                        facts.sets_computed_setting |=
                            nodes(call.args).next().and_then(|first| string_constant(first)).is_none();
                    }
                }
                _ => {}
            }
            unguarded::raw_expression_tree_walker(node, Some(visit), (facts as *mut StatementFacts).cast())
        }
    }
    // SAFETY: the walker knows every node a raw query tree holds, which is all it is given.
    unsafe { visit(node, (facts as *mut StatementFacts).cast()) };
}

/// The value of a string constant; `None` for anything else.
///
/// # Safety
///
/// `node` is null or points to a node.
unsafe fn string_constant(node: *mut pg_sys::Node) -> Option<String> {
    // SAFETY: the caller's promise; an A_Const holds its value inline, a String node when its
    // tag says so.
    unsafe {
        let constant = (tag(node) == Some(NodeTag::T_A_Const)).then(|| &*node.cast::<pg_sys::A_Const>())?;
        (!constant.isnull && constant.val.node.type_ == NodeTag::T_String).then(|| text(constant.val.sval.sval))?
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

/// The value of a String node; `None` for anything else.
///
/// # Safety
///
/// `node` is null or points to a node.
unsafe fn string_value(node: *mut pg_sys::Node) -> Option<String> {
    // SAFETY: the caller's promise; a String node's `sval` is a NUL-terminated string.
    unsafe { (tag(node) == Some(NodeTag::T_String)).then(|| text((*node.cast::<pg_sys::String>()).sval)).flatten() }
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
