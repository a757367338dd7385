//! Tests that run inside a PostgreSQL backend with the library preloaded (`cargo pgrx test`).
//! The test server's secret is the first published vector's, set in `crate::pg_test`.
#![forbid(unsafe_code)]

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

    /// An error reaches PostgreSQL as declared in `errors.rs`: its SQLSTATE, message and hint.
    #[pg_test]
    fn errors_reach_postgresql_as_declared() {
        use crate::errors::Error;
        use randflake::ParseIdError;

        let reported = PgTryBuilder::new(|| {
            Spi::run("SELECT randflake_from_string('0v')").expect("an ERROR, not an SPI failure");
            None
        })
        .catch_others(|caught| match caught {
            pgrx::pg_sys::panic::CaughtError::PostgresError(report)
            | pgrx::pg_sys::panic::CaughtError::ErrorReport(report) => {
                Some((report.sql_error_code(), report.message().to_owned(), report.hint().map(str::to_owned)))
            }
            other => panic!("not an ERROR: {other:?}"),
        })
        .execute()
        .expect("randflake_from_string('0v') fails");
        let declared = Error::InvalidIdString { input: "0v".into(), reason: ParseIdError::LeadingZero }.parts();
        assert_eq!(reported, (declared.0, declared.1, Some(declared.2)));
    }
}
