# bash completion for kcert. Installed as share/bash-completion/completions/kcert; to try it
# from a build: `source scripts/completion/kcert.bash`.
#
# The words come from kcert's own --help texts (subcommands, options, choices such as
# --device {cpu,cuda}), read once per shell and cached, so a new option completes without
# editing this file. Profiles complete from the `profiles:` keys of the given case files.

# _kcert_help WORDS... : the --help text of `kcert WORDS`, cached by the words.
_kcert_help() {
  local key="${*:-_}"
  key=${key// /_}
  key=${key//-/_}
  local var="_kcert_help_cache_${key}"
  if [[ -z ${!var+x} ]]; then
    printf -v "$var" '%s' "$(KCERT_NO_REEXEC=1 "${_kcert_bin:-kcert}" "$@" --help 2>/dev/null)"
  fi
  printf '%s\n' "${!var}"
}

# Subcommand names listed under "Subcommands:".
_kcert_subcommands() {
  _kcert_help "$@" | awk '/^Subcommands:/{s=1; next} s && /^  [a-z]/{print $1} s && /^$/{exit}'
}

# Long options ("--json", "-h,--help" -> "--help").
_kcert_options() {
  _kcert_help "$@" | grep -oE '^  (-[a-zA-Z],)?--[a-z][a-z0-9-]*' | sed -E 's/^  (-[a-zA-Z],)?//'
}

# The choices CLI11 prints for an option ("--device TEXT:{cpu,cuda}=cpu" -> "cpu cuda").
_kcert_choices() {
  local option=$1
  shift
  _kcert_help "$@" | grep -E "^  (-[a-zA-Z],)?${option} " | grep -oE '\{[^}]*\}' | head -1 | tr -d '{}' | tr ',' ' '
}

# Whether the option takes a value (CLI11 prints a type after it: TEXT, INT, UINT, ...).
_kcert_takes_value() {
  local option=$1
  shift
  _kcert_help "$@" | grep -qE "^  (-[a-zA-Z],)?${option} +[A-Z]"
}

_kcert() {
  local cur prev
  cur=${COMP_WORDS[COMP_CWORD]}
  prev=${COMP_WORDS[COMP_CWORD-1]}
  _kcert_bin=${COMP_WORDS[0]}

  # The command path so far (kcert db migrate -> "db migrate"), skipping options and their values.
  local path=() i word
  for ((i = 1; i < COMP_CWORD; i++)); do
    word=${COMP_WORDS[i]}
    if [[ $word == -* ]]; then
      _kcert_takes_value "$word" "${path[@]}" && ((i++))
      continue
    fi
    if _kcert_subcommands "${path[@]}" | grep -qx -- "$word"; then
      path+=("$word")
    fi
  done

  if [[ $prev == -* ]] && _kcert_takes_value "$prev" "${path[@]}"; then
    local choices
    choices=$(_kcert_choices "$prev" "${path[@]}")
    if [[ -n $choices ]]; then
      mapfile -t COMPREPLY < <(compgen -W "$choices" -- "$cur")
    elif [[ $prev == --profile ]]; then
      # The profiles the named case files (or the controls) define.
      local files=() w
      for w in "${COMP_WORDS[@]:1}"; do [[ -e $w && $w != -* ]] && files+=("$w"); done
      ((${#files[@]})) || files=(testcases)
      mapfile -t COMPREPLY < <(compgen -W "$(grep -rhsA20 '^profiles:' --include='*.yaml' "${files[@]}" |
        grep -oE '^  [a-z][a-z0-9_-]*:' | tr -d ' :' | sort -u)" -- "$cur")
    else
      mapfile -t COMPREPLY < <(compgen -f -- "$cur")
    fi
    return 0
  fi

  if [[ $cur == -* ]]; then
    mapfile -t COMPREPLY < <(compgen -W "$(_kcert_options "${path[@]}")" -- "$cur")
    return 0
  fi
  local subcommands
  subcommands=$(_kcert_subcommands "${path[@]}")
  if [[ -n $subcommands ]]; then
    mapfile -t COMPREPLY < <(compgen -W "$subcommands" -- "$cur")
  else
    # Positionals are case files and folders, report folders, run ids: complete paths.
    mapfile -t COMPREPLY < <(compgen -f -- "$cur")
  fi
  return 0
}
complete -o filenames -o bashdefault -F _kcert kcert
