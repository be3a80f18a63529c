"""The dashboard's pages, one script each, which app.py wires with st.navigation."""
