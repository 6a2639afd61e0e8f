package config

import (
	"fmt"
	"reflect"
	"strings"
)

// Reference returns the configuration reference in Markdown (docs/config.md), generated from
// the declarations in config.go.
func Reference() string {
	var b strings.Builder
	b.WriteString(`# Configuration reference

<!-- Generated from internal/config/config.go by ` + "`make docs`" + `. Do not edit by hand. -->

One YAML file configures both processes: ` + "`bridge run --config FILE`" + ` and
` + "`projector run --config FILE`" + `; ` + "`bridge config check FILE`" + ` checks it offline. The values
come, each overriding the one before, from the defaults below, the file, the environment and the
command-line flags:

- **Environment**: a key reached through mappings only (not inside a list) is also read from
  ` + "`JETBUS_<KEY PATH>`" + `, upper-cased with dots as underscores: ` + "`nats.tls.ca`" + ` is
  ` + "`JETBUS_NATS_TLS_CA`" + `. A list is a comma-separated string. An unknown variable of a known section
  (` + "`JETBUS_NATS_URL`" + `) is an error.
- **Interpolation**: ` + "`${NAME}`" + ` in any value of the file is replaced by the environment variable
  NAME (` + "`${NAME:default}`" + ` when it may be unset; ` + "`$${`" + ` is a literal ` + "`${`" + `), to keep secrets out of it.
- **Flags**: ` + "`--nats-url`" + `, ` + "`--nats-creds`" + `, ` + "`--nats-nkey`" + `, ` + "`--nats-user`" + `, ` + "`--nats-password`" + `,
  ` + "`--nats-token`" + `, ` + "`--tls-ca`" + `, ` + "`--tls-cert`" + `, ` + "`--tls-key`" + `, ` + "`--mongo-uri`" + `, ` + "`--http-addr`" + `,
  ` + "`--log-level`" + ` set the keys they name.
- **Paths** in the file are relative to the file's directory; from the environment or a flag,
  to the working directory.
- **Errors**: unknown keys, wrong types, bad values and references to undeclared topics,
  projections or views are all reported at once, each with the file, line and key path
  (or the variable or flag that set it); the process does not start.

Types: a *duration* is a Go duration (` + "`30s`, `5m`, `24h`" + `) or a whole number of days (` + "`7d`" + `);
a *size* is bytes with an optional unit (` + "`512KiB`, `1MiB`, `10GB`" + `).
A commented example is ` + "[`examples/jetbus.yaml`](../examples/jetbus.yaml)" + `.
`)
	for _, f := range fieldsOf(reflect.TypeFor[Config]()) {
		fmt.Fprintf(&b, "\n## `%s`\n\n%s\n\n", f.key, f.desc)
		b.WriteString("| key | type | default | environment | description |\n|---|---|---|---|---|\n")
		rows(&b, f, f.key, true)
	}
	return b.String()
}

func rows(b *strings.Builder, f field, path string, env bool) {
	t := f.typ
	switch {
	case t.Kind() == reflect.Struct && t != timeType:
		for _, sf := range fieldsOf(t) {
			rows(b, sf, path+"."+sf.key, env)
		}
		return
	case t.Kind() == reflect.Slice && t.Elem().Kind() == reflect.Struct:
		row(b, f, path, false)
		for _, sf := range fieldsOf(t.Elem()) {
			rows(b, sf, path+"[]."+sf.key, false)
		}
		return
	}
	row(b, f, path, env && t.Kind() != reflect.Map)
}

func row(b *strings.Builder, f field, path string, env bool) {
	def := ""
	if f.def != "" {
		def = "`" + f.def + "`"
	}
	envName := ""
	if env {
		envName = "`" + EnvName(path) + "`"
	}
	desc := f.desc
	var notes []string
	if f.required {
		notes = append(notes, "Required.")
	}
	if len(f.enum) > 0 {
		what := "One of"
		if f.typ.Kind() == reflect.Map {
			what = "Values: one of"
		}
		notes = append(notes, what+" `"+strings.Join(f.enum, "`, `")+"`.")
	}
	unit := ""
	if f.typ == durationType {
		unit = "s"
	}
	if f.min != nil && *f.min > 0 {
		notes = append(notes, fmt.Sprintf("At least %d%s.", *f.min, unit))
	}
	if f.max != nil {
		notes = append(notes, fmt.Sprintf("At most %d.", *f.max))
	}
	if f.secret {
		notes = append(notes, "Secret: never logged.")
	}
	if f.example != "" {
		notes = append(notes, "Example: `"+f.example+"`.")
	}
	if len(notes) > 0 {
		desc += " " + strings.Join(notes, " ")
	}
	desc = strings.ReplaceAll(desc, "|", `\|`)
	fmt.Fprintf(b, "| `%s` | %s | %s | %s | %s |\n", path, typeName(f.typ), def, envName, desc)
}
