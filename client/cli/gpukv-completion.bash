# bash completion for gpukv (installed as share/bash-completion/completions/gpukv).
# Commands and options come from gpukv's own --help, so they follow the CLI; keys come from the
# daemon the command line names (-s/-u/--token-file, else GPUKV_URL or the default socket),
# folded at '/' and at most 200 at a time, as `gpukv ls -d PREFIX` lists them.

_gpukv_global_args() {
    # The connection options already on the line, to reach the same daemon.
    local i w
    for ((i = 1; i < COMP_CWORD; i++)); do
        w=${COMP_WORDS[i]}
        case $w in
        -s | --socket | -u | --url | --token-file)
            printf '%s\n%s\n' "$w" "${COMP_WORDS[i + 1]}"
            ((i++))
            ;;
        --socket=* | --url=* | --token-file=*) printf '%s\n' "$w" ;;
        esac
    done
}

_gpukv() {
    local cur prev cmd i
    COMPREPLY=()
    cur=${COMP_WORDS[COMP_CWORD]}
    prev=${COMP_WORDS[COMP_CWORD - 1]}
    # The command: the first word that is not a global option or its value.
    for ((i = 1; i < COMP_CWORD; i++)); do
        case ${COMP_WORDS[i]} in
        -s | --socket | -u | --url | --token-file) ((i++)) ;;
        -*) ;;
        *)
            cmd=${COMP_WORDS[i]}
            break
            ;;
        esac
    done
    case $prev in
    -s | --socket | --token-file | -f | --file | -o | --output)
        compopt -o filenames 2>/dev/null
        mapfile -t COMPREPLY < <(compgen -f -- "$cur")
        return
        ;;
    -u | --url)
        mapfile -t COMPREPLY < <(compgen -W "unix: tcp:" -- "$cur")
        return
        ;;
    esac
    if [ -z "$cmd" ]; then
        local words
        if [[ $cur == -* ]]; then
            words="-s --socket -u --url --token-file -h --help --help-all --version"
        else
            words=$(gpukv --help 2>/dev/null | sed -n '/^commands:/,/^$/p' | awk 'NF > 1 {print $1}')
        fi
        mapfile -t COMPREPLY < <(compgen -W "$words" -- "$cur")
        return
    fi
    if [[ $cur == -* ]]; then
        local opts
        opts=$(gpukv "$cmd" --help 2>/dev/null | grep -oE '(^|[ ,])--?[a-z][a-z-]*' | tr -d ' ,')
        mapfile -t COMPREPLY < <(compgen -W "$opts" -- "$cur")
        return
    fi
    case $cmd in
    get | set | del | exists | size | map | expire | ttl | persist | move | ls)
        local -a conn
        mapfile -t conn < <(_gpukv_global_args)
        compopt -o nospace 2>/dev/null
        mapfile -t COMPREPLY < <(gpukv "${conn[@]}" ls -d -- "$cur" 2>/dev/null | head -n 200)
        ;;
    info)
        mapfile -t COMPREPLY < <(compgen -W "server clients memory stats keyspace leases limits host-copies gpus persistence" -- "$cur")
        ;;
    esac
}

complete -F _gpukv gpukv
