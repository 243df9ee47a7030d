#!/bin/sh
# Writes a man page made of a program's own --help (and its subcommands'), so
# that `man collectived` says exactly what `collectived --help` says.
#   help-to-man.sh OUTPUT NAME SECTION SUMMARY PROGRAM [SUBCOMMAND...]
set -eu
output=$1 name=$2 section=$3 summary=$4 program=$5
shift 5

# roff: a backslash is \e; a line starting with . or ' would be a request.
# CLI11 prints the path it was started as; the page names the program.
escape() {
  sed -e "s|Usage: $program|Usage: $name|" -e 's/\\/\\e/g' -e "s/^\([.']\)/\\\\\&\1/"
}

upper() { printf '%s' "$1" | tr '[:lower:]' '[:upper:]'; }
manual="User Commands"
[ "$section" = 8 ] && manual="System Administration"
version=$("$program" --version)
{
  printf '.TH %s %s "" "%s %s" "%s"\n' "$(upper "$name")" "$section" "$name" "$version" "$manual"
  printf '.SH NAME\n%s \\- %s\n' "$name" "$summary"
  printf '.SH DESCRIPTION\n.nf\n'
  "$program" --help | escape
  printf '.fi\n'
  for subcommand in "$@"; do
    printf '.SH "%s %s"\n.nf\n' "$(upper "$name")" "$(upper "$subcommand")"
    # shellcheck disable=SC2086 # a subcommand may be two words (timeline start)
    "$program" $subcommand --help | escape
    printf '.fi\n'
  done
  printf '.SH "SEE ALSO"\ncollectived(8), collectivectl(1), collectiverun(1), the README and docs/ in the documentation directory\n'
} >"$output.tmp"
mv "$output.tmp" "$output"
