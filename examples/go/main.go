// Command decode reads Randflake IDs made by randflake_pg with the Go reference port
// (gosuda.org/randflake/v2), without asking the database.
//
//	RANDFLAKE_SECRET_FILE=/etc/postgresql/15/main/randflake.key go run . ID [ID ...]
//	RANDFLAKE_SECRET=<32 hex digits> go run . --string STRING [STRING ...]
//
// IDs are signed decimal 64-bit integers (what a bigint column holds; about half are negative),
// or with --string their canonical base32hex form (what randflake_to_string() returns). The
// secret comes from exactly one of RANDFLAKE_SECRET (32 hex digits) or RANDFLAKE_SECRET_FILE (a
// file holding them, accessible to its owner only, like the server's key file).
//
// Output, one line per ID in the order given, the same values as randflake_to_string(id) and
// randflake_decode(id) in SQL:
//
//	<id> <string> <unix_seconds> <node> <sequence>
//
// Bad input prints nothing on stdout, one message on stderr, and exits with status 2. No message
// contains the secret or a part of it.
//
// Decoding does not authenticate: every 64-bit value decodes to some (second, node, sequence).
//
// To make IDs in a Go application as well, build a randflake.Generator with randflake.New and a
// Lease on a node that no server uses (see examples/python/make_ids.py for why, and
// examples/README.md).
package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	randflake "gosuda.org/randflake/v2"
)

const (
	secretEnv     = "RANDFLAKE_SECRET"
	secretFileEnv = "RANDFLAKE_SECRET_FILE"
	secretDigits  = 32
	// A key file is 32 digits and a newline; anything much larger is the wrong file.
	keyFileMaxBytes = 4096

	usage = `usage: decode [--string] ID [ID ...]

Decode Randflake IDs: prints <id> <string> <unix_seconds> <node> <sequence> per ID.

  ID         signed decimal 64-bit IDs (or strings with --string)
  --string   the IDs are base32hex strings, not decimal
  -h, --help show this help and exit

The secret comes from RANDFLAKE_SECRET or RANDFLAKE_SECRET_FILE.
`
)

// inputError is bad input. Messages describe the input's shape, never the secret.
type inputError string

func (e inputError) Error() string { return string(e) }

func fail(format string, args ...any) error {
	return inputError(fmt.Sprintf(format, args...))
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	asStrings, texts, help, err := parseArgs(args)
	if help {
		fmt.Fprint(stdout, usage)
		return 0
	}
	var ids []int64
	if err == nil {
		ids, err = parseIDs(texts, asStrings)
	}
	var secret []byte
	if err == nil {
		secret, err = loadSecret()
	}
	var generator *randflake.Generator
	if err == nil {
		generator, err = decoder(secret)
	}
	if err != nil {
		fmt.Fprintf(stderr, "decode: %v\n", err)
		return 2
	}
	out := bufio.NewWriter(stdout)
	for _, id := range ids {
		parts := generator.Inspect(id)
		fmt.Fprintf(out, "%d %s %d %d %d\n", id, randflake.EncodeString(id), parts.Timestamp, parts.NodeID, parts.Sequence)
	}
	if err := out.Flush(); err != nil {
		fmt.Fprintf(stderr, "decode: cannot write the output: %v\n", err)
		return 1
	}
	return 0
}

// parseArgs separates options from IDs. A negative decimal ID ("-42") is an ID, not an option;
// "--" ends the options.
func parseArgs(args []string) (asStrings bool, texts []string, help bool, err error) {
	optionsEnded := false
	for _, arg := range args {
		if optionsEnded || !strings.HasPrefix(arg, "-") || isNegativeNumber(arg) {
			texts = append(texts, arg)
			continue
		}
		switch arg {
		case "--":
			optionsEnded = true
		case "--string":
			asStrings = true
		case "-h", "--help":
			return false, nil, true, nil
		default:
			return false, nil, false, fail("unknown option %s (see --help)", shown(arg))
		}
	}
	if len(texts) == 0 {
		return false, nil, false, fail("no IDs given (see --help)")
	}
	return asStrings, texts, false, nil
}

func isNegativeNumber(arg string) bool {
	if len(arg) < 2 || arg[0] != '-' {
		return false
	}
	for _, c := range arg[1:] {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// shown quotes an argument for a message, cut short: no ID is longer than 20 characters, and a
// secret pasted by mistake where an ID belongs (32 digits) is never echoed whole.
func shown(text string) string {
	runes := []rune(text)
	if len(runes) > 20 {
		return strconv.Quote(string(runes[:20]) + "…")
	}
	return strconv.Quote(text)
}

func parseIDs(texts []string, asStrings bool) ([]int64, error) {
	ids := make([]int64, 0, len(texts))
	for _, text := range texts {
		id, err := parseID(text, asStrings)
		if err != nil {
			return nil, err
		}
		ids = append(ids, id)
	}
	return ids, nil
}

func parseID(text string, asString bool) (int64, error) {
	if asString {
		id, err := randflake.DecodeString(text)
		if err != nil {
			return 0, fail("%s is not an ID string: canonical base32hex is 1 to 13 characters of "+
				"0-9 and a-v (lower case), with no leading zero, padding or sign, at most 64 bits", shown(text))
		}
		return id, nil
	}
	// Base 10: an optional sign and ASCII digits, no prefixes or underscores.
	id, err := strconv.ParseInt(text, 10, 64)
	if errors.Is(err, strconv.ErrRange) {
		return 0, fail("%s is outside the signed 64-bit range of IDs", shown(text))
	}
	if err != nil {
		return 0, fail("%s is not a decimal ID (pass --string for base32hex strings)", shown(text))
	}
	return id, nil
}

// loadSecret returns the 16-byte secret from RANDFLAKE_SECRET or the file named by
// RANDFLAKE_SECRET_FILE.
func loadSecret() ([]byte, error) {
	value, hasValue := os.LookupEnv(secretEnv)
	path, hasPath := os.LookupEnv(secretFileEnv)
	switch {
	case hasValue && hasPath:
		return nil, fail("both %s and %s are set; set only one", secretEnv, secretFileEnv)
	case hasValue:
		return parseSecret(value, secretEnv)
	case path != "":
		return readKeyFile(path)
	}
	return nil, fail("no secret: set %s (32 hex digits) or %s (a key file)", secretEnv, secretFileEnv)
}

// parseSecret accepts exactly 32 hex digits, either case. Errors name positions, never characters.
func parseSecret(text, origin string) ([]byte, error) {
	runes := []rune(text)
	if len(runes) != secretDigits {
		return nil, fail("%s has %d characters; it must be exactly %d hex digits", origin, len(runes), secretDigits)
	}
	secret := make([]byte, 0, secretDigits/2)
	for position := 0; position < secretDigits; position += 2 {
		high, okHigh := hexValue(runes[position])
		low, okLow := hexValue(runes[position+1])
		if !okHigh || !okLow {
			bad := position
			if okHigh {
				bad++
			}
			return nil, fail("%s has a character that is not a hex digit at position %d", origin, bad)
		}
		secret = append(secret, high<<4|low)
	}
	return secret, nil
}

func hexValue(c rune) (byte, bool) {
	switch {
	case c >= '0' && c <= '9':
		return byte(c - '0'), true
	case c >= 'a' && c <= 'f':
		return byte(c - 'a' + 10), true
	case c >= 'A' && c <= 'F':
		return byte(c - 'A' + 10), true
	}
	return 0, false
}

// readKeyFile reads 32 hex digits, white space around them allowed, and refuses a file that its
// group or others may access (the rule the server applies to randflake.secret_file).
func readKeyFile(path string) ([]byte, error) {
	origin := "the key file named by " + secretFileEnv
	file, err := os.Open(path)
	if err != nil {
		return nil, fail("%s cannot be read: %v", origin, reason(err))
	}
	defer file.Close()
	info, err := file.Stat()
	if err != nil {
		return nil, fail("%s cannot be read: %v", origin, reason(err))
	}
	if !info.Mode().IsRegular() {
		return nil, fail("%s is not a regular file", origin)
	}
	if info.Mode().Perm()&0o077 != 0 {
		return nil, fail("%s has permissions %04o; it must not be accessible to group or others (chmod 600)",
			origin, info.Mode().Perm())
	}
	content, err := io.ReadAll(io.LimitReader(file, keyFileMaxBytes+1))
	if err != nil {
		return nil, fail("%s cannot be read: %v", origin, reason(err))
	}
	if len(content) > keyFileMaxBytes {
		return nil, fail("%s is far larger than a key file", origin)
	}
	return parseSecret(strings.TrimSpace(string(content)), origin)
}

// reason is the operating system's error without the path around it.
func reason(err error) error {
	var pathError *os.PathError
	if errors.As(err, &pathError) {
		return pathError.Err
	}
	return err
}

// decoder is a reference Generator used only to inspect. Config requires a lease; this one
// (node 0, the first second of the epoch) is never used, because this program generates nothing.
func decoder(secret []byte) (*randflake.Generator, error) {
	return randflake.New(randflake.Config{
		Lease:  randflake.Lease{NodeID: 0, Start: randflake.Epoch, EndExclusive: randflake.Epoch + 1},
		Secret: secret,
	})
}
