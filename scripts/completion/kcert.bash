# bash completion for kcert. Installed as share/bash-completion/completions/kcert; to try it
# from a build: `source scripts/completion/kcert.bash`.
#
# The words come from kcert's own --help texts (subcommands, options, choices such as
# --device {cpu,cuda}), so a new option completes without editing this file. Profiles complete
# from the `profiles:` keys of the given case files, case ids (history) from their `id:` keys,
# families (list) from `kcert list --json`, run ids (db abandon) from the spool and report
# folders under $KCERT_HOME.
#
# Speed: one `kcert --help` costs most of a second (LibTorch loads), and a TAB may need
# several texts. Each text is read once per binary: kept in this shell (an associative array,
# filled in the shell itself, never in a pipeline's subshell where it would be lost) and on
# disk under ${XDG_CACHE_HOME:-~/.cache}/kcert/completion, keyed by the binary's path, size and
# modification time, so a new shell's first TAB and a rebuilt kcert are both right.

declare -gA _kcert_cache=()

# _kcert_cache_dir: sets _kcert_dir to the disk cache folder of the binary $_kcert_bin, or to
# "" when there is none to use (no HOME, binary not found, folder not writable).
_kcert_cache_dir() {
  _kcert_dir=
  local path stamp base=${XDG_CACHE_HOME:-${HOME:+$HOME/.cache}}
  [[ -n $base ]] || return 0
  path=$(type -P -- "$_kcert_bin") || return 0
  [[ $path == /* ]] || path=$PWD/$path
  stamp=$(stat -L -c '%s-%Y' -- "$path" 2>/dev/null) || return 0
  path=${path//\//%}
  _kcert_dir=$base/kcert/completion/${path}-$stamp
  [[ -d $_kcert_dir ]] || mkdir -p -m 700 -- "$_kcert_dir" 2>/dev/null || _kcert_dir=
}

# _kcert_text NAME ARGS... : sets _kcert_out to the standard output of `kcert ARGS...`,
# cached under NAME (a word of [a-z_-]) for this binary (its folder _kcert_dir, when there is
# one, names the binary's path, size and time, so a rebuilt kcert is asked again). Runs in the
# calling shell.
_kcert_text() {
  local name=$1
  shift
  local key="${_kcert_dir:-$_kcert_bin}|$name"
  if [[ -z ${_kcert_cache[$key]+x} ]]; then
    local text= file=
    [[ -n $_kcert_dir ]] && file=$_kcert_dir/$name
    if [[ -n $file && -f $file ]]; then
      text=$(<"$file")
    else
      text=$(KCERT_NO_REEXEC=1 "$_kcert_bin" "$@" 2>/dev/null)
      if [[ -n $file && -n $text ]]; then
        # Written whole, then renamed: a TAB in another shell never reads half a text.
        printf '%s' "$text" >"$file.$$" 2>/dev/null && mv -f -- "$file.$$" "$file" 2>/dev/null
        rm -f -- "$file.$$" 2>/dev/null
      fi
    fi
    _kcert_cache[$key]=$text
  fi
  _kcert_out=${_kcert_cache[$key]}
}

# _kcert_help WORDS... : sets _kcert_out to the --help text of `kcert WORDS`.
_kcert_help() {
  local name="help_${*}"
  name=${name// /_}
  _kcert_text "$name" "$@" --help
}

# Subcommand names listed under "Subcommands:".
_kcert_subcommands() {
  _kcert_help "$@"
  _kcert_out=$(awk '/^Subcommands:/{s=1; next} s && /^  [a-z]/{print $1} s && /^$/{exit}' <<<"$_kcert_out")
}

# Long options ("--json", "-h,--help" -> "--help").
_kcert_options() {
  _kcert_help "$@"
  _kcert_out=$(grep -oE '^  (-[a-zA-Z],)?--[a-z][a-z0-9-]*' <<<"$_kcert_out" | sed -E 's/^  (-[a-zA-Z],)?//')
}

# The choices CLI11 prints for an option ("--device TEXT:{cpu,cuda}=cpu" -> "cpu cuda").
_kcert_choices() {
  local option=$1
  shift
  _kcert_help "$@"
  _kcert_out=$(grep -E "^  (-[a-zA-Z],)?${option} " <<<"$_kcert_out" | grep -oE '\{[^}]*\}' | head -1 | tr -d '{}' | tr ',' ' ')
}

# Whether the option takes a value (CLI11 prints a type after it: TEXT, INT, UINT, ...).
_kcert_takes_value() {
  local option=$1
  shift
  _kcert_help "$@"
  grep -qE "^  (-[a-zA-Z],)?${option} +[A-Z]" <<<"$_kcert_out"
}

# The case files and folders named on the line, else the controls (./testcases, or the
# installed ones beside the binary).
_kcert_case_files() {
  _kcert_files=()
  local w
  for w in "${COMP_WORDS[@]:1:COMP_CWORD-1}"; do [[ $w != -* && -e $w ]] && _kcert_files+=("$w"); done
  ((${#_kcert_files[@]})) && return 0
  if [[ -d testcases ]]; then
    _kcert_files=(testcases)
  else
    local bin
    bin=$(type -P -- "$_kcert_bin") && [[ -d ${bin%/*}/../share/kcert/testcases ]] &&
      _kcert_files=("${bin%/*}/../share/kcert/testcases")
  fi
}

# Positional words a command takes that are not paths: case ids, families, run ids.
_kcert_positionals() {
  _kcert_out=
  case "$*" in
    history)
      _kcert_case_files
      ((${#_kcert_files[@]})) &&
        _kcert_out=$(grep -rhsE --include='*.yaml' '^id: *[A-Za-z0-9_.-]+ *$' "${_kcert_files[@]}" | sed -E 's/^id: *//; s/ *$//' | sort -u)
      ;;
    list)
      _kcert_text list_json list --json
      _kcert_out=$(grep -oE '^      "family": "[A-Za-z0-9_.-]+"' <<<"$_kcert_out" | sed -E 's/.*: "(.*)"/\1/')
      ;;
    "db abandon")
      # File names are anyone's (a cloned .kcert/): only plain ids become words, since
      # compgen -W expands what it is given ($(...) in a name would run).
      local home=${KCERT_HOME:-.kcert} f names=()
      for f in "$home"/spool/* "$home"/reports/*; do
        f=${f##*/}
        [[ $f == *.jsonl ]] && f=${f%.jsonl}
        f=${f%-shard[0-9]*}
        [[ $f =~ ^[A-Za-z0-9._-]+$ && $f != "*" ]] && names+=("$f")
      done
      _kcert_out=${names[*]}
      ;;
    *) return 1 ;;
  esac
  return 0
}

_kcert() {
  local cur prev _kcert_out _kcert_files _kcert_dir _kcert_bin
  cur=${COMP_WORDS[COMP_CWORD]}
  prev=${COMP_WORDS[COMP_CWORD-1]}
  _kcert_bin=${COMP_WORDS[0]}
  _kcert_cache_dir

  # The command path so far (kcert db migrate -> "db migrate"), skipping options and their values.
  local path=() i word
  for ((i = 1; i < COMP_CWORD; i++)); do
    word=${COMP_WORDS[i]}
    if [[ $word == -* ]]; then
      _kcert_takes_value "$word" "${path[@]}" && ((i++))
      continue
    fi
    _kcert_subcommands "${path[@]}"
    if grep -qx -- "$word" <<<"$_kcert_out"; then
      path+=("$word")
    fi
  done

  if [[ $prev == -* ]] && _kcert_takes_value "$prev" "${path[@]}"; then
    _kcert_choices "$prev" "${path[@]}"
    if [[ -n $_kcert_out ]]; then
      mapfile -t COMPREPLY < <(compgen -W "$_kcert_out" -- "$cur")
    elif [[ $prev == --profile ]]; then
      # The profiles the named case files (or the controls) define.
      _kcert_case_files
      ((${#_kcert_files[@]})) &&  # grep -r given no file would search the current folder
        mapfile -t COMPREPLY < <(compgen -W "$(grep -rhsA20 '^profiles:' --include='*.yaml' "${_kcert_files[@]}" |
          grep -oE '^  [a-z][a-z0-9_-]*:' | tr -d ' :' | sort -u)" -- "$cur")
    else
      mapfile -t COMPREPLY < <(compgen -f -- "$cur")
    fi
    return 0
  fi

  if [[ $cur == -* ]]; then
    _kcert_options "${path[@]}"
    mapfile -t COMPREPLY < <(compgen -W "$_kcert_out" -- "$cur")
    return 0
  fi
  _kcert_subcommands "${path[@]}"
  if [[ -n $_kcert_out ]]; then
    mapfile -t COMPREPLY < <(compgen -W "$_kcert_out" -- "$cur")
  elif _kcert_positionals "${path[@]}"; then
    mapfile -t COMPREPLY < <(compgen -W "$_kcert_out" -- "$cur")
  else
    # Other positionals are case files and folders, report folders, spool files: paths.
    mapfile -t COMPREPLY < <(compgen -f -- "$cur")
  fi
  return 0
}
complete -o filenames -o bashdefault -F _kcert kcert
