#!/bin/sh
# The host discovery script of the discovery tests: the hosts the test wrote
# (collectiverun runs this every second with its own environment).
exec cat "$COLLECTIVE_TEST_HOSTS_FILE"
