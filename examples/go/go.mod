module randflake_pg/examples/go

go 1.23.0

// The Go reference port's v2 API; v2.1.0 is the release that matches PyPI randflake 2.1.0.
// go.sum is not committed: the first `go mod tidy` writes it, checked against sum.golang.org.
require gosuda.org/randflake/v2 v2.1.0
