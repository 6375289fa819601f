"""share"""
