// Command go-pgx is the pgx recipe of docs/clients.md: it inserts rows keyed by randflake_next(),
// reads them back by ID and by string, and decodes them as a role allowed to; and does the same
// with a randflake_key column, whose value pgx reads and writes as the canonical string.
//
// It connects with the libpq environment variables (PGHOST, PGPORT, PGDATABASE, PGUSER: the
// application's role); RANDFLAKE_AUDITOR names the role that was granted EXECUTE on
// randflake_decode and randflake_timestamp. It prints one JSON document for the test to check
// against the server, and exits 1 if any step disagrees with another.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/jackc/pgconn"
	"github.com/jackc/pgx/v4"
)

// An ID is an int64 end to end: pgx reads and writes bigint in binary, all 64 bits. In JSON the
// `string` option writes it as a quoted decimal, which JavaScript clients cannot round.
type orderRow struct {
	Note string `json:"note"`
	ID   int64  `json:"id,string"`
	Text string `json:"text"`
}

type decodedID struct {
	ID          int64 `json:"id,string"`
	UnixSeconds int64 `json:"unixSeconds"`
	Node        int32 `json:"node"`
	Sequence    int32 `json:"sequence"`
}

// A randflake_key is the canonical string in Go: pgx knows no such type, so it reads the text
// form into a string and sends a string parameter as text. Public is the same ID as a bigint.
type keyedRow struct {
	Note   string `json:"note"`
	ID     string `json:"id"`
	Public int64  `json:"public,string"`
}

type report struct {
	Rows         []orderRow  `json:"rows"`
	DecodeDenied string      `json:"decodeDenied"`
	Decoded      []decodedID `json:"decoded"`
	Keyed        []keyedRow  `json:"keyed"`
}

const orderCount = 20

func main() {
	if err := run(context.Background()); err != nil {
		fmt.Fprintln(os.Stderr, "go-pgx:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context) error {
	auditorRole := os.Getenv("RANDFLAKE_AUDITOR")
	if auditorRole == "" {
		return errors.New("set RANDFLAKE_AUDITOR to the role that may decode IDs")
	}
	app, err := pgx.Connect(ctx, "")
	if err != nil {
		return err
	}
	defer app.Close(ctx)
	auditorConfig, err := pgx.ParseConfig("")
	if err != nil {
		return err
	}
	auditorConfig.User = auditorRole
	auditor, err := pgx.ConnectConfig(ctx, auditorConfig)
	if err != nil {
		return err
	}
	defer auditor.Close(ctx)

	_, err = app.Exec(ctx, `CREATE TABLE IF NOT EXISTS orders (
		id bigint PRIMARY KEY DEFAULT randflake_next(), note text NOT NULL)`)
	if err != nil {
		return err
	}

	var out report
	for i := 0; i < orderCount; i++ {
		row := orderRow{Note: fmt.Sprintf("go order %d", i)}
		err := app.QueryRow(ctx, "INSERT INTO orders (note) VALUES ($1) RETURNING id, randflake_to_string(id)",
			row.Note).Scan(&row.ID, &row.Text)
		if err != nil {
			return err
		}
		var note string
		if err := app.QueryRow(ctx, "SELECT note FROM orders WHERE id = $1", row.ID).Scan(&note); err != nil {
			return fmt.Errorf("reading %d back by ID: %w", row.ID, err)
		}
		var byString int64
		err = app.QueryRow(ctx, "SELECT id FROM orders WHERE id = randflake_from_string($1)", row.Text).Scan(&byString)
		if err != nil {
			return fmt.Errorf("reading %s back by string: %w", row.Text, err)
		}
		if note != row.Note || byString != row.ID {
			return fmt.Errorf("row %d read back as (%q, %d)", row.ID, note, byString)
		}
		out.Rows = append(out.Rows, row)
	}

	// Decoding needs the secret, so only a role granted EXECUTE may call it.
	var ignored time.Time
	err = app.QueryRow(ctx, "SELECT timestamp FROM randflake_decode($1)", out.Rows[0].ID).Scan(&ignored)
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return fmt.Errorf("the application's role decoded an ID (error: %v)", err)
	}
	out.DecodeDenied = pgErr.Code

	for _, row := range out.Rows {
		var made, madeAgain time.Time
		decoded := decodedID{ID: row.ID}
		err := auditor.QueryRow(ctx, `SELECT d.timestamp, d.node_id, d.sequence, randflake_timestamp($1)
			FROM randflake_decode(randflake_from_string($2)) AS d`, row.ID, row.Text).
			Scan(&made, &decoded.Node, &decoded.Sequence, &madeAgain)
		if err != nil {
			return fmt.Errorf("decoding %d: %w", row.ID, err)
		}
		if !made.Equal(madeAgain) {
			return fmt.Errorf("%d: randflake_decode says %v, randflake_timestamp %v", row.ID, made, madeAgain)
		}
		decoded.UnixSeconds = made.Unix()
		out.Decoded = append(out.Decoded, decoded)
	}
	if out.Keyed, err = keyedRows(ctx, app); err != nil {
		return err
	}
	return json.NewEncoder(os.Stdout).Encode(out)
}

// keyedRows inserts rows keyed by randflake_next_key() and reads each back by its string and by
// its bigint. An int64 parameter is cast to bigint in the SQL: sent untyped, its decimal text
// would be parsed as a canonical string.
func keyedRows(ctx context.Context, app *pgx.Conn) ([]keyedRow, error) {
	_, err := app.Exec(ctx, `CREATE TABLE IF NOT EXISTS keyed_orders (
		id randflake_key PRIMARY KEY DEFAULT randflake_next_key(), note text NOT NULL)`)
	if err != nil {
		return nil, err
	}
	var rows []keyedRow
	for i := 0; i < orderCount; i++ {
		row := keyedRow{Note: fmt.Sprintf("go keyed %d", i)}
		err := app.QueryRow(ctx, "INSERT INTO keyed_orders (note) VALUES ($1) RETURNING id, id::bigint",
			row.Note).Scan(&row.ID, &row.Public)
		if err != nil {
			return nil, err
		}
		var byString, byPublic string
		// Typed as text, the string is compared with the key; untyped, the server would read it as
		// a key, which only roles with the decoder grant may make.
		if err := app.QueryRow(ctx, "SELECT note FROM keyed_orders WHERE id = $1::text", row.ID).Scan(&byString); err != nil {
			return nil, fmt.Errorf("reading %s back by string: %w", row.ID, err)
		}
		err = app.QueryRow(ctx, "SELECT id FROM keyed_orders WHERE id = $1::bigint", row.Public).Scan(&byPublic)
		if err != nil {
			return nil, fmt.Errorf("reading %d back by bigint: %w", row.Public, err)
		}
		if byString != row.Note || byPublic != row.ID {
			return nil, fmt.Errorf("key %s read back as (%q, %s)", row.ID, byString, byPublic)
		}
		rows = append(rows, row)
	}
	return rows, nil
}
