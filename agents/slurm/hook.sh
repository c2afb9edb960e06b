# Shared by prolog.sh and epilog.sh (sourced, not run): configuration lookup and the call
# into Python. slurmd gives its Prolog and Epilog no PATH and only SLURM_* variables.
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
conf=${INTERSTICE_AGENT_CONF:-/etc/interstice/agent.conf}

# conf_value KEY DEFAULT: the last KEY=value line of the configuration, else DEFAULT.
conf_value() {
    local value
    value=$(sed -n "s/^[[:space:]]*$1[[:space:]]*=[[:space:]]*//p" "$conf" 2>/dev/null | tail -n 1)
    value=${value%\"}; value=${value#\"}; value=${value%\'}; value=${value#\'}
    printf '%s' "${value:-$2}"
}

# run_hook prolog|epilog: run `interstice slurm <hook>`; a failure goes to syslog, never to
# the exit code (a non-zero Prolog or Epilog drains the node).
run_hook() {
    local interstice
    interstice=$(conf_value interstice_bin interstice)
    if ! INTERSTICE_AGENT_CONF=$conf "$interstice" slurm "$1"; then
        logger -t "interstice-$1" "job ${SLURM_JOB_ID:-?}: '$interstice slurm $1' failed" || true
    fi
}
