module randflake_pg/examples/go-pgx

go 1.19

// pgx v4 is the major Debian 12 packages (golang-github-jackc-pgx-v4-dev 4.15.0), which is how
// the test suite builds this example: GOPATH mode over /usr/share/gocode, no module download.
// With the module proxy, `go mod tidy` fetches these versions and writes go.sum.
require (
	github.com/jackc/pgconn v1.11.0
	github.com/jackc/pgx/v4 v4.15.0
)
