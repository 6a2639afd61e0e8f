// Package cli is the command line the bridge and projector binaries share, on cobra: how
// errors become exit statuses (0 success, 1 failure, 2 usage), the connection flags and how
// they load the configuration, flag types that refuse bad values while parsing (enums,
// times), progress for long work, the commands both binaries have (run, config check), and the
// command reference README.md carries.
//
// Exit statuses: a usage error (unknown command or flag, wrong argument count, a bad flag
// value, a missing subcommand) prints the problem naming the bad word and a hint to --help,
// and exits 2; --help exits 0; a command that fails exits 1.
//
// It does not implement the commands' work: that is in the packages they call (process, ops,
// config, dlq, schema).
package cli
