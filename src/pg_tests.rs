//! Tests that run inside a PostgreSQL backend with the library preloaded (`cargo pgrx test`).
//! The test server's secret is the first published vector's, set in `crate::pg_test`.

use pgrx::prelude::*;

#[pg_schema]
mod tests {
    use pgrx::prelude::*;

    fn query_row<T: IntoDatum + FromDatum>(sql: &str) -> T {
        Spi::get_one::<T>(sql).expect("query runs").expect("query returns a value")
    }

    #[pg_test]
    fn the_published_vector_decodes_with_its_secret() {
        let (second, node, sequence) = Spi::get_three::<i64, i32, i32>(
            "SELECT extract(epoch FROM timestamp)::bigint, node_id, sequence
               FROM randflake_decode(4594531474933654033)",
        )
        .unwrap();
        assert_eq!((second, node, sequence), (Some(1_733_706_297), Some(42), Some(1)));
    }

    #[pg_test]
    fn new_ids_decode_to_this_second_and_a_node_of_the_range() {
        let ok: bool = query_row(
            "SELECT abs(extract(epoch FROM d.timestamp - now())) < 5
                    AND d.node_id BETWEEN current_setting('randflake.node_id_min')::int
                                      AND current_setting('randflake.node_id_max')::int
                    AND d.sequence >= 0
               FROM randflake_decode(randflake_next()) d",
        );
        assert!(ok);
    }

    /// 300000 IDs cannot come from one node in one second (131072 at most), so one statement
    /// must switch nodes, never repeat, and never error or reuse a sequence.
    #[pg_test]
    fn one_statement_outruns_a_node_without_repeating() {
        let (ids, distinct, slots) = Spi::get_three::<i64, i64, i64>(
            "WITH ids AS (SELECT randflake_next() AS id FROM generate_series(1, 300000)),
                  parts AS (SELECT d.* FROM ids, randflake_decode(ids.id) d)
             SELECT (SELECT count(*) FROM ids),
                    (SELECT count(DISTINCT id) FROM ids),
                    (SELECT count(DISTINCT (timestamp, node_id)) FROM parts)",
        )
        .unwrap();
        assert_eq!(ids, Some(300_000));
        assert_eq!(distinct, Some(300_000));
        assert!(slots.unwrap() >= 3, "{slots:?} (second, node) pairs for 300000 IDs");
        let widest: i32 =
            query_row("SELECT max(d.sequence) FROM generate_series(1, 1000), randflake_decode(randflake_next()) d");
        assert!(widest <= 131_071);
    }

    #[pg_test]
    fn strings_of_new_ids_round_trip() {
        let mismatches: i64 = query_row(
            "SELECT count(*) FROM (SELECT randflake_next() AS id FROM generate_series(1, 20000)) s
              WHERE randflake_from_string(randflake_to_string(id)) <> id
                 OR randflake_to_string(id) !~ '^[1-9a-v][0-9a-v]{0,12}$'",
        );
        assert_eq!(mismatches, 0);
    }

    #[pg_test(error = "invalid Randflake ID string \"00\": the string has a leading zero")]
    fn leading_zeros_are_an_error() {
        Spi::run("SELECT randflake_from_string('00')").unwrap();
    }

    /// The lease keeper runs in this database (see `crate::pg_test`), so by the time a call
    /// returns an ID the server holds a lease covering that ID's second and node.
    #[pg_test]
    fn ids_come_from_inside_the_published_lease() {
        let inside: bool = query_row(
            "SELECT s.state = 'active'
                    AND d.node_id BETWEEN s.first_node AND s.last_node
                    AND d.timestamp BETWEEN s.lease_start AND s.issuable_through
                    AND s.nodes_in_use >= 1 AND s.keeper_pid IS NOT NULL
               FROM randflake_decode(randflake_next()) d, randflake_status() s",
        );
        assert!(inside);
        let leases: i64 =
            query_row("SELECT count(*) FROM randflake.node_leases WHERE lease_end >= extract(epoch FROM now())");
        assert_eq!(leases, 1);
    }

    #[pg_test]
    fn the_secret_is_hidden_from_listings() {
        let listed: i64 = query_row("SELECT count(*) FROM pg_settings WHERE name = 'randflake.secret'");
        assert_eq!(listed, 0);
    }

    /// docs/dba-guide.md, "Errors and what to do", against `errors.rs`: every error matches
    /// exactly one row of the table, by the beginning of its message, and that row has its
    /// SQLSTATE; every row is some error's, or the one row of rejected settings.
    #[pg_test]
    fn the_dba_guide_lists_every_error_as_raised() {
        use crate::errors::{catalog, INVALID_SETTING};

        let rows = documented_errors(include_str!("../docs/dba-guide.md"));
        let examples = catalog::one_of_each();
        let mut kinds: Vec<usize> = examples.iter().map(catalog::kind).collect();
        kinds.sort_unstable();
        assert_eq!(kinds, (0..catalog::KINDS).collect::<Vec<_>>(), "one example of each kind of Error");
        let mut rows_used = vec![false; rows.len()];
        for error in &examples {
            let (sqlstate, message) = catalog::reported(error);
            let matching: Vec<usize> = (0..rows.len())
                .filter(|&row| rows[row].1.iter().any(|pattern| begins_like(&message, pattern)))
                .collect();
            assert_eq!(matching.len(), 1, "rows of the DBA guide's error table matching \"{message}\": {matching:?}");
            let row = &rows[matching[0]];
            assert_eq!(row.0, sqlstate, "SQLSTATE of \"{message}\" in the DBA guide");
            rows_used[matching[0]] = true;
        }
        let setting_state = catalog::sqlstate_text(INVALID_SETTING);
        let unused: Vec<_> = rows.iter().zip(rows_used).filter(|(_, used)| !used).map(|(row, _)| row).collect();
        assert!(
            unused.len() == 1 && unused[0].0 == setting_state,
            "besides one row for rejected settings ({setting_state}), the DBA guide lists errors the code does not raise: {unused:?}"
        );
    }

    /// The first table of the DBA guide's errors section: each row's SQLSTATE and the message
    /// beginnings in backquotes in its second column.
    fn documented_errors(guide: &str) -> Vec<(String, Vec<String>)> {
        let section =
            guide.split("\n## 8. Errors and what to do\n").nth(1).expect("the DBA guide has its errors section");
        let table =
            section.split("| SQLSTATE | message begins | when | what to do |\n").nth(1).expect("the error table");
        table
            .lines()
            .skip(1)
            .take_while(|line| line.starts_with('|'))
            .map(|line| {
                let cells: Vec<&str> = line.split('|').map(str::trim).collect();
                let patterns = cells[2].split('`').skip(1).step_by(2).map(str::to_owned).collect();
                (cells[1].to_owned(), patterns)
            })
            .collect()
    }

    /// Whether `message` begins as `pattern` says, where a lone capital N, S, T, A or B, or an
    /// ellipsis, stands for any text.
    fn begins_like(message: &str, pattern: &str) -> bool {
        let chars: Vec<char> = pattern.chars().collect();
        let is_placeholder = |at: usize| {
            let lone = |near: Option<&char>| !near.is_some_and(|c| c.is_alphanumeric());
            chars[at] == '…'
                || ("NSTAB".contains(chars[at])
                    && lone(at.checked_sub(1).and_then(|before| chars.get(before)))
                    && lone(chars.get(at + 1)))
        };
        let mut pieces = vec![String::new()];
        for (at, &c) in chars.iter().enumerate() {
            if is_placeholder(at) {
                pieces.push(String::new());
            } else {
                pieces.last_mut().expect("never empty").push(c);
            }
        }
        let Some(mut rest) = message.strip_prefix(pieces[0].as_str()) else { return false };
        for piece in &pieces[1..] {
            // A placeholder stands for at least one character.
            let mut skip = rest.chars().next().map_or(0, char::len_utf8);
            if skip == 0 {
                return piece.is_empty();
            }
            if piece.is_empty() {
                rest = &rest[skip..];
                continue;
            }
            match rest[skip..].find(piece.as_str()) {
                Some(at) => {
                    skip += at + piece.len();
                    rest = &rest[skip..];
                }
                None => return false,
            }
        }
        true
    }
}
