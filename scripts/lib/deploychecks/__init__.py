"""The checks of scripts/lib/deploycheck.py (validate-deploy.sh's Python), one module per concern."""

