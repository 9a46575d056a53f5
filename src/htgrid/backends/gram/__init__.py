"""The gt GAHP server: GRAM2/GRAM5 job managers through the Grid Community Toolkit."""
