# bash completion for collectived, collectivectl and collectiverun
# (installed by cmake/Install.cmake under each program's name in
# share/bash-completion/completions, where bash-completion loads it on first
# use; or `source` it from ~/.bashrc).
#
# The options and subcommands are read from the program's own --help at
# completion time, so they are always those of the version on PATH, and
# nothing here needs editing when a flag is added. An option shown with a
# value (`--socket PATH`) completes file names for PATH, FILE or DIR values.
# collectiverun's own options end at the first word that is neither an
# option nor an option's value: from there on the words are the command's
# (a program, then file names).

# _collective_read_help PROGRAM [SUBCOMMAND...]: reads PROGRAM's --help into
# _collective_options (every option name), _collective_values ("NAME TYPE"
# for each option that takes a value) and _collective_subcommands.
_collective_read_help() {
    _collective_options=()
    _collective_values=()
    _collective_subcommands=()
    local line entry names type section= name
    local -a list
    while IFS= read -r line; do
        # A group's title ("Options:", "Logging:", "Subcommands:"), unindented.
        if [[ $line =~ ^([^ ].*):$ ]]; then
            section=${BASH_REMATCH[1],,}
            continue
        fi
        [[ $line =~ ^\ +([^ ].*)$ ]] || continue
        entry=${BASH_REMATCH[1]}
        entry=${entry%%  *}  # CLI11's first column: names, then the value's type
        if [[ $entry == -* ]]; then  # an option, in whichever group
            names=${entry%% *}
            type=
            [[ $entry == *' '* ]] && type=${entry#* }
            IFS=, read -ra list <<<"$names"
            for name in "${list[@]}"; do
                _collective_options+=("$name")
                [[ -n $type ]] && _collective_values+=("$name ${type%% *}")
            done
        elif [[ $section == subcommands ]]; then
            _collective_subcommands+=("${entry%% *}")
        fi
    done < <("$@" --help 2>/dev/null)
}

# _collective_value_type NAME: the type of option NAME's value, "" for a flag.
_collective_value_type() {
    local pair
    for pair in "${_collective_values[@]}"; do
        if [[ ${pair%% *} == "$1" ]]; then
            printf '%s\n' "${pair#* }"
            return
        fi
    done
}

_collective_complete() {
    local program=${COMP_WORDS[0]} cur=${COMP_WORDS[COMP_CWORD]} word type i
    local -a path=("$program")
    _collective_read_help "$program"
    COMPREPLY=()
    # Walk the words before the cursor: subcommands deepen the help read,
    # an option's value is skipped, and collectiverun's command starts at its
    # first other word.
    for ((i = 1; i < COMP_CWORD; i++)); do
        word=${COMP_WORDS[i]}
        if [[ $word == -* ]]; then
            [[ $word == *=* ]] && continue
            if [[ $program == collectiverun && $word == -np ]]; then
                word=--np  # mpirun's spelling, which collectiverun takes
            fi
            [[ -n $(_collective_value_type "$word") ]] && ((i++))
            [[ $word == -- ]] && { ((i++)); break; }
        elif [[ " ${_collective_subcommands[*]} " == *" $word "* ]]; then
            path+=("$word")
            _collective_read_help "${path[@]}"
        elif [[ $program == collectiverun ]]; then
            break
        fi
    done
    if [[ $program == collectiverun && $i -lt $COMP_CWORD ]] ||
        [[ $program == collectiverun && $i -eq $COMP_CWORD && ${COMP_WORDS[i-1]} == -- ]]; then
        # The command and its arguments.
        if ((i == COMP_CWORD)); then
            mapfile -t COMPREPLY < <(compgen -c -- "$cur")
        else
            mapfile -t COMPREPLY < <(compgen -f -- "$cur")
        fi
        return
    fi
    if ((COMP_CWORD > 1)); then
        type=$(_collective_value_type "${COMP_WORDS[COMP_CWORD-1]}")
        [[ $program == collectiverun && ${COMP_WORDS[COMP_CWORD-1]} == -np ]] && type=N
        if [[ -n $type ]]; then
            case $type:${COMP_WORDS[COMP_CWORD-1]} in
                PATH:* | FILE:* | TEXT:FILE:* | TEXT:*socket* | TEXT:*file* | TEXT:*config*)
                    mapfile -t COMPREPLY < <(compgen -f -- "$cur") ;;
                DIR:*) mapfile -t COMPREPLY < <(compgen -d -- "$cur") ;;
                *'|'*:*)  # a choice, as text|json
                    type=${type%%:*}
                    mapfile -t COMPREPLY < <(compgen -W "${type//|/ }" -- "$cur") ;;
            esac
            return
        fi
    fi
    if [[ $cur == -* ]]; then
        mapfile -t COMPREPLY < <(compgen -W "${_collective_options[*]}" -- "$cur")
    elif ((${#_collective_subcommands[@]})); then
        mapfile -t COMPREPLY < <(compgen -W "${_collective_subcommands[*]}" -- "$cur")
    elif [[ $program == collectiverun ]]; then
        mapfile -t COMPREPLY < <(compgen -c -- "$cur")
    else
        mapfile -t COMPREPLY < <(compgen -f -- "$cur")
    fi
}

complete -F _collective_complete collectived collectivectl collectiverun
